"""The sample pool: a small, real, deterministic candidate pool built from installed packages.

Photographs ship inside scikit-image (`skimage.data`), scikit-learn (china.jpg, flower.jpg) and
matplotlib (grace_hopper.jpg), so the pool needs no network and no image binaries in git.
Layout of the output folder:

    originals/   the photographs, bytes copied unchanged
    variants/    near-duplicates of some originals (resize, JPEG quality, crop, brightness,
                 one exact byte copy)
    edge/        odd but valid files ingest must accept (PNG named .jpg, CMYK, 16-bit,
                 palette+alpha, animated GIF, EXIF-rotated)
    broken/      files ingest must reject, each with the reason code it should get
    cc3m.tsv     CC3M-style `caption<TAB>url` rows (local paths, relative to the TSV)
    sample_manifest.json   every file with its kind and expected ingest outcome

Manifest kinds: `original`, `variant-of:<original file>` (with `transform`), `edge:accept`,
`broken:<reason code>`. `expected` is `accept` or `reject:<reason>` for ingesting the folder;
`group` names the photograph a file shows (near-duplicate ground truth for dedupe).
"""

from __future__ import annotations

import io
import json
import os
import random
import shutil
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageEnhance

MANIFEST = "sample_manifest.json"
TSV = "cc3m.tsv"
SEED = 20240601

# skimage.data loader name -> file name in the package (photographs only).
SKIMAGE_PHOTOS = {
    "astronaut": "astronaut.png",
    "camera": "camera.png",
    "chelsea": "chelsea.png",
    "coffee": "coffee.png",
    "coins": "coins.png",
    "hubble_deep_field": "hubble_deep_field.jpg",
    "immunohistochemistry": "ihc.png",
    "retina": "retina.jpg",
    "rocket": "rocket.jpg",
    "clock": "clock_motion.png",
    "moon": "moon.png",
    "page": "page.png",
    "text": "text.png",
}

# (original stem, transform name, function) -> variants/<stem>__<name>.jpg
VARIANTS: list[tuple[str, str, str]] = [
    ("astronaut", "resize50", "resize to 50%, JPEG q90"),
    ("camera", "resize50", "resize to 50%, JPEG q90"),
    ("chelsea", "jpeg_q30", "re-encode as JPEG quality 30"),
    ("coffee", "crop90", "crop to the 90% box at offset (3%, 4%), JPEG q90"),
    ("flower", "crop85", "centre crop to 85%, JPEG q90"),
    ("rocket", "brighter", "brightness x1.25, JPEG q90"),
    ("hubble_deep_field", "darker", "brightness x0.8, JPEG q90"),
    ("grace_hopper", "resize75_q60", "resize to 75%, JPEG q60"),
    ("china", "exact_copy", "byte-identical copy (ingest collapses it: exact_duplicate)"),
]


def _skimage_bytes(name: str, file_name: str) -> tuple[bytes, str]:
    import skimage.data

    path = Path(skimage.data.__file__).parent / file_name
    if path.exists():
        return path.read_bytes(), Path(file_name).suffix
    # Older/newer scikit-image may keep the file elsewhere: encode what the loader returns.
    array = getattr(skimage.data, name)()
    return _encode(Image.fromarray(array), "PNG"), ".png"


def _photo_sources() -> dict[str, tuple[bytes, str, str]]:
    """stem -> (bytes, suffix, origin) for every original photograph."""
    from matplotlib import cbook
    from sklearn.datasets import load_sample_image

    photos: dict[str, tuple[bytes, str, str]] = {}
    for name, file_name in SKIMAGE_PHOTOS.items():
        data, suffix = _skimage_bytes(name, file_name)
        photos[name] = (data, suffix, f"skimage.data.{name}")
    import sklearn.datasets

    images_dir = Path(sklearn.datasets.__file__).parent / "images"
    for name in ("china", "flower"):
        path = images_dir / f"{name}.jpg"
        data = (
            path.read_bytes()
            if path.exists()
            else _encode(Image.fromarray(load_sample_image(f"{name}.jpg")), "JPEG")
        )
        photos[name] = (data, ".jpg", f"sklearn.datasets.load_sample_image('{name}.jpg')")
    hopper = Path(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False))
    photos["grace_hopper"] = (
        hopper.read_bytes(),
        ".jpg",
        "matplotlib.cbook.get_sample_data('grace_hopper.jpg')",
    )
    return photos


def _encode(image: Image.Image, fmt: str, **params: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def _open_rgb(data: bytes) -> Image.Image:
    with Image.open(io.BytesIO(data)) as image:
        return image.convert("RGB")


def _transform(image: Image.Image, name: str) -> bytes:
    w, h = image.size
    if name.startswith("resize"):
        factor = 0.5 if name.startswith("resize50") else 0.75
        image = image.resize((round(w * factor), round(h * factor)), Image.Resampling.LANCZOS)
    elif name == "crop90":
        left, top = round(w * 0.03), round(h * 0.04)
        image = image.crop((left, top, left + round(w * 0.9), top + round(h * 0.9)))
    elif name == "crop85":
        dw, dh = round(w * 0.075), round(h * 0.075)
        image = image.crop((dw, dh, w - dw, h - dh))
    elif name in ("brighter", "darker"):
        image = ImageEnhance.Brightness(image).enhance(1.25 if name == "brighter" else 0.8)
    quality = 30 if name == "jpeg_q30" else 60 if name.endswith("q60") else 90
    return _encode(image, "JPEG", quality=quality)


def _bomb_png(width: int = 100_000, height: int = 100_000) -> bytes:
    """A 60-byte PNG whose header declares width x height pixels (built without the pixels)."""

    def chunk(kind: bytes, payload: bytes) -> bytes:
        return (
            struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit grayscale
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00"))
        + chunk(b"IEND", b"")
    )


def _exif_rotated_jpeg(array: np.ndarray) -> bytes:
    image = Image.fromarray(array).convert("RGB")
    exif = Image.Exif()
    exif[0x0112] = 6  # stored sideways: viewers rotate 90 degrees clockwise
    return _encode(image, "JPEG", quality=90, exif=exif.tobytes())


def _animated_gif(array: np.ndarray) -> bytes:
    base = Image.fromarray(array).convert("RGB").resize((320, 320))
    frames = [ImageEnhance.Brightness(base).enhance(f).convert("P") for f in (0.8, 1.0, 1.2)]
    return _encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=200, loop=0)


def _palette_alpha(rgba: np.ndarray) -> bytes:
    """The logo with its near-white background made transparent, as a 64-colour palette PNG."""
    rgba = rgba.copy()
    rgba[..., 3] = np.where((rgba[..., :3] > 235).all(axis=-1), 0, 255)
    return _encode(Image.fromarray(rgba).quantize(colors=64), "PNG")


def _edge_files() -> list[tuple[str, Callable[[], bytes], dict[str, Any]]]:
    """Odd but valid files (built from skimage images that are not among the originals)."""
    from skimage import data

    return [
        ("edge/png_named.jpg", lambda: _encode(Image.fromarray(data.gravel()), "PNG"),
         {"group": "gravel", "format": "PNG", "converted_from": "L", "note": "PNG content, .jpg name"}),
        ("edge/cmyk.jpg", lambda: _encode(Image.fromarray(data.colorwheel()).convert("CMYK"), "JPEG", quality=90),
         {"group": "colorwheel", "format": "JPEG", "converted_from": "CMYK"}),
        ("edge/gray16.png", lambda: _encode(Image.fromarray(data.grass().astype(np.uint16) * 257), "PNG"),
         {"group": "grass", "format": "PNG", "converted_from": "I;16"}),
        ("edge/palette_alpha.png", lambda: _palette_alpha(data.logo()),
         {"group": "logo", "format": "PNG", "converted_from": "P"}),
        ("edge/animated.gif", lambda: _animated_gif(data.brick()),
         {"group": "brick", "format": "GIF", "converted_from": "P", "note": "3 frames; first is used"}),
        ("edge/exif_rotated.jpg", lambda: _exif_rotated_jpeg(data.cell()),
         {"group": "cell", "format": "JPEG", "width": 660, "height": 550, "orientation_applied": True}),
    ]  # fmt: skip


def _broken_files(rng: random.Random) -> list[tuple[str, Callable[[], bytes], str]]:
    from skimage import data

    right = Image.fromarray(data.stereo_motorcycle()[1])
    full_jpeg = _encode(right, "JPEG", quality=90)
    return [
        ("broken/empty.jpg", lambda: b"", "empty_file"),
        ("broken/truncated.jpg", lambda: full_jpeg[: len(full_jpeg) * 45 // 100], "truncated_image"),
        ("broken/random_bytes.jpg", lambda: rng.randbytes(8192), "not_an_image"),
        ("broken/notes.txt", lambda: b"These are notes, not an image.\n" * 20, "not_an_image"),
        ("broken/too_small.jpg", lambda: _encode(right.resize((48, 40)), "JPEG", quality=90), "too_small"),
        ("broken/extreme_aspect.jpg", lambda: _encode(right.crop((0, 200, 740, 300)), "JPEG"), "extreme_aspect_ratio"),
        ("broken/bomb.png", _bomb_png, "decompression_bomb"),
    ]  # fmt: skip


def _tsv_rows() -> list[tuple[str, str, str, str]]:
    """(caption, url, expected when the TSV is ingested alone, expected with the folder first)."""
    dup = "reject:exact_duplicate"
    return [
        ("an astronaut in a white suit in front of a flag", "originals/astronaut.png", "accept", dup),
        ("a tabby cat looking to the side", "originals/chelsea.png", "accept", dup),
        ("a cup of coffee on a saucer", "originals/coffee.png", "accept", dup),
        ("a rocket on the launch pad, brightened", "variants/rocket__brighter.jpg", "accept", dup),
        ("a gravel texture saved as PNG under a .jpg name", "edge/png_named.jpg", "accept", dup),
        ("a motorcycle photo cut short", "broken/truncated.jpg", "reject:truncated_image", "reject:truncated_image"),
        ("a file that does not exist", "missing/does_not_exist.jpg", "reject:file_not_found", "reject:file_not_found"),
        ("a directory, not a file", "originals", "reject:unreadable_path", "reject:unreadable_path"),
        ("a loopback URL", "http://127.0.0.1:9/private.jpg", "reject:private_host", "reject:private_host"),
        ("a row without a url", "", "reject:malformed_row", "reject:malformed_row"),
    ]  # fmt: skip


def _prepare_out(out: Path) -> None:
    """Rebuild in place if `out` is an earlier pool; refuse to mix the pool into other files."""
    if out.exists() and any(out.iterdir()):
        if not (out / MANIFEST).exists():
            raise FileExistsError(f"{out} is not empty and holds no {MANIFEST}; choose an empty folder")
        for name in ("originals", "variants", "edge", "broken"):
            shutil.rmtree(out / name, ignore_errors=True)
        (out / TSV).unlink(missing_ok=True)
        (out / MANIFEST).unlink()
    out.mkdir(parents=True, exist_ok=True)


def _write(out: Path, relative: str, data: bytes) -> None:
    path = out / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def build_sample_pool(out: str | Path, seed: int = SEED) -> dict[str, Any]:
    """Build the pool into `out`; returns the manifest (also written to out/sample_manifest.json)."""
    out = Path(out)
    _prepare_out(out)
    rng = random.Random(seed)
    files: list[dict[str, Any]] = []
    photos = _photo_sources()
    for stem, (data, suffix, origin) in sorted(photos.items()):
        _write(out, f"originals/{stem}{suffix}", data)
        entry = {"kind": "original", "origin": origin, "group": stem, "expected": "accept"}
        files.append({"file": f"originals/{stem}{suffix}", **entry})
    for stem, name, description in VARIANTS:
        data, suffix, _origin = photos[stem]
        payload = data if name == "exact_copy" else _transform(_open_rgb(data), name)
        relative = f"variants/{stem}__{name}{suffix if name == 'exact_copy' else '.jpg'}"
        _write(out, relative, payload)
        expected = "reject:exact_duplicate" if name == "exact_copy" else "accept"
        kind = f"variant-of:originals/{stem}{suffix}"
        files.append(
            {"file": relative, "kind": kind, "transform": description, "group": stem, "expected": expected}
        )
    for relative, build, info in _edge_files():
        _write(out, relative, build())
        files.append({"file": relative, "kind": "edge:accept", "expected": "accept", **info})
    for relative, build, reason in _broken_files(rng):
        _write(out, relative, build())
        files.append({"file": relative, "kind": f"broken:{reason}", "expected": f"reject:{reason}"})
    files += _symlink_loop(out)
    rows = _tsv_rows()
    (out / TSV).write_text(
        "".join(f"{caption}\t{url}\n" if url else f"{caption}\n" for caption, url, *_ in rows)
    )
    manifest = {
        "seed": seed,
        "files": sorted(files, key=lambda f: f["file"]),
        "tsv": {
            "file": TSV,
            "rows": [
                {"caption": c, "url": u, "expected_alone": a, "expected_with_folder": w}
                for c, u, a, w in rows
            ],
        },
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


def sample_sources(pool: str | Path) -> list[str]:
    """The ingest sources of a built pool: the folder itself and its CC3M-style TSV."""
    return [str(Path(pool)), str(Path(pool) / TSV)]


def _symlink_loop(out: Path) -> list[dict[str, Any]]:
    """broken/loop_a.jpg -> loop_b.jpg -> loop_a.jpg (skipped where symlinks are unsupported)."""
    a, b = out / "broken" / "loop_a.jpg", out / "broken" / "loop_b.jpg"
    try:
        os.symlink("loop_b.jpg", a)
        os.symlink("loop_a.jpg", b)
    except (OSError, NotImplementedError):
        return []
    entry = {"kind": "broken:symlink_loop", "expected": "reject:symlink_loop"}
    return [{"file": "broken/loop_a.jpg", **entry}, {"file": "broken/loop_b.jpg", **entry}]
