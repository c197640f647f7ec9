"""Near-duplicate removal against imagededup 0.3.3 PHash: quality on planted variants, and speed.

    .venv/bin/pip install --no-deps imagededup==0.3.3 PyWavelets     # benchmark only, not a dependency
    .venv/bin/python benchmarks/bench_dedupe_peer.py --quality --speed 5000 20000

quality: distinct photographs (tiles cut from the packaged sample photographs, 2x2 per photo, plus
the whole photos, at 512 px) and, for every one, planted variants built here: border crops of 2-5%
per side (random per side), a 5% crop of every side, 0.5x rescale, JPEG q30, brightness +-10%, a 2 degree
rotation (inner box kept, no fill). Recall per kind = variants grouped with their original;
false merges = groups holding two distinct photographs. Project: `lenses ingest` + `lenses dedupe`
(defaults, CLIP off); imagededup: PHash at its default radius (10).
speed: N 512-px JPEGs (photos cut and jittered, 5% planted near-duplicates); the project's two CLI
commands (start-up included, ingest.workers=2) vs imagededup `encode_images` + `find_duplicates`
(2 workers) in a fresh interpreter, alternately, on the same files, in one run.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageEnhance

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
LENSES = str(Path(sys.executable).with_name("lenses"))
# `imagededup.methods/__init__` builds the CNN (and downloads weights): register the package
# without running it, then import the hashing module alone.
PEER = """
import json, sys, time, types, importlib.util
spec = importlib.util.find_spec("imagededup")
methods = types.ModuleType("imagededup.methods")
methods.__path__ = [spec.submodule_search_locations[0] + "/methods"]
sys.modules["imagededup.methods"] = methods
from imagededup.methods.hashing import PHash
t = time.perf_counter()
hasher = PHash(verbose=False)
enc = hasher.encode_images(image_dir=sys.argv[1], num_enc_workers=2)
found = hasher.find_duplicates(encoding_map=enc, num_dist_workers=2)
print(json.dumps({k: v for k, v in found.items() if v}))
"""


def photos() -> list[Image.Image]:
    from lenses_data.candidates.sample import _photo_sources

    return [Image.open(io.BytesIO(d)).convert("RGB") for d, _s, _o in _photo_sources().values()]


def originals() -> list[Image.Image]:
    out = []
    for photo in photos():
        w, h = photo.size
        out += [
            photo.crop((x * w // 2, y * h // 2, (x + 1) * w // 2, (y + 1) * h // 2))
            for x in (0, 1)
            for y in (0, 1)
        ]
        out.append(photo)
    return [o.resize((512, round(512 * o.height / o.width)), Image.Resampling.BICUBIC) for o in out]


def _crop(image: Image.Image, rng: np.random.Generator, lo: float, hi: float) -> Image.Image:
    w, h = image.size
    left, top, right, bottom = rng.uniform(lo, hi, 4)
    return image.crop((round(left * w), round(top * h), w - round(right * w), h - round(bottom * h)))


def _rotate(image: Image.Image, degrees: float) -> Image.Image:
    w, h = image.size
    turned = image.rotate(degrees, resample=Image.Resampling.BICUBIC)
    slope = np.tan(np.radians(abs(degrees)))
    dx, dy = int(h * slope / 2) + 1, int(w * slope / 2) + 1
    return turned.crop((dx, dy, w - dx, h - dy))


VARIANTS = {
    "crop 2-5% per side": lambda im, rng: (_crop(im, rng, 0.02, 0.05), 90),
    "crop 5% every side": lambda im, rng: (_crop(im, rng, 0.05, 0.05), 90),
    "rescale 0.5x": lambda im, rng: (
        im.resize((im.width // 2, im.height // 2), Image.Resampling.BICUBIC),
        90,
    ),
    "JPEG q30": lambda im, rng: (im, 30),
    "brightness +10%": lambda im, rng: (ImageEnhance.Brightness(im).enhance(1.1), 90),
    "brightness -10%": lambda im, rng: (ImageEnhance.Brightness(im).enhance(0.9), 90),
    "rotation 2 deg": lambda im, rng: (_rotate(im, float(rng.choice([-2.0, 2.0]))), 90),
}


def make_quality_set(folder: Path) -> dict[str, tuple[str, str]]:
    """file name -> (photo id, kind); originals have kind 'original'."""
    rng = np.random.default_rng(15)
    truth = {}
    for index, image in enumerate(originals()):
        image.save(folder / f"p{index:03d}_original.jpg", quality=90)
        truth[f"p{index:03d}_original.jpg"] = (f"p{index:03d}", "original")
        for k, (kind, build) in enumerate(VARIANTS.items()):
            variant, quality = build(image, rng)
            name = f"p{index:03d}_v{k}.jpg"
            variant.save(folder / name, quality=quality)
            truth[name] = (f"p{index:03d}", kind)
    return truth


def ours(folder: Path, run: Path) -> tuple[float, dict[str, str]]:
    """(seconds for both CLI commands, file name -> group id)."""
    started = time.perf_counter()
    for argv in (
        ["ingest", "--source", str(folder), "--run", str(run), "--workers", "2"],
        ["dedupe", "--run", str(run)],
    ):
        subprocess.run([LENSES, *argv], check=True, capture_output=True)
    seconds = time.perf_counter() - started
    from lenses_data import io as lio
    from lenses_data.schemas import CandidateImage, DedupeRecord

    images = lio.read_stage(run, "ingest", CandidateImage)
    records = lio.read_stage(run, "dedupe", DedupeRecord)
    group = dict(zip(records["image_id"], records["group_id"], strict=True))
    return seconds, {Path(p).name: group[i] for p, i in zip(images["path"], images["image_id"], strict=True)}


def peer(folder: Path) -> tuple[float, dict[str, str]]:
    """(seconds, file name -> group id) for imagededup PHash at its default radius."""
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", PEER, str(folder)], check=True, capture_output=True, text=True
    )
    seconds = time.perf_counter() - started
    found = json.loads(out.stdout.strip().splitlines()[-1])
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    names = sorted(p.name for p in folder.glob("*.jpg"))
    at = {n: i for i, n in enumerate(names)}
    edges = [(at[a], at[b]) for a, bs in found.items() for b in bs]
    a, b = (
        (np.array(x, dtype=np.int64) for x in zip(*edges, strict=True)) if edges else (np.zeros(0, int),) * 2
    )
    labels = connected_components(
        coo_matrix((np.ones(len(a)), (a, b)), shape=(len(names),) * 2), directed=False
    )[1]
    return seconds, {n: str(labels[i]) for n, i in at.items()}


def score(truth: dict[str, tuple[str, str]], groups: dict[str, str]) -> dict:
    original_group = {photo: groups[name] for name, (photo, kind) in truth.items() if kind == "original"}
    recall = {}
    for kind in VARIANTS:
        hits = [groups[n] == original_group[p] for n, (p, k) in truth.items() if k == kind]
        recall[kind] = (sum(hits), len(hits))
    photos_in_group: dict[str, set] = {}
    for name, (photo, _kind) in truth.items():
        photos_in_group.setdefault(groups[name], set()).add(photo)
    false = sum(len(p) - 1 for p in photos_in_group.values())  # extra distinct photos per group
    return {"recall": recall, "false_merges": false}


def cpu_pressure() -> str:
    try:
        return Path("/proc/pressure/cpu").read_text().split()[1].replace("avg10=", "") + "%"
    except OSError:
        return "n/a"


def quality() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "images"
        folder.mkdir()
        truth = make_quality_set(folder)
        _, our_groups = ours(folder, Path(tmp) / "run")
        _, their_groups = peer(folder)
        summary = json.loads((Path(tmp) / "run" / "dedupe" / "summary.json").read_text())
    return {"images": len(truth), "distinct": sum(k == "original" for _p, k in truth.values()),
            "ours": score(truth, our_groups), "imagededup": score(truth, their_groups),
            "crop_signal": summary.get("crop_signal")}  # fmt: skip


def make_speed_set(folder: Path, count: int) -> None:
    """512-px JPEGs cut from the photographs at random windows and jittered; 5% are near-copies."""
    rng = np.random.default_rng(count)
    sources = photos()
    made = []
    for index in range(count):
        if index % 20 == 19:  # planted near-duplicate of an earlier image
            base = made[int(rng.integers(0, len(made)))]
            image = ImageEnhance.Brightness(base).enhance(float(rng.uniform(0.9, 1.1)))
        else:
            photo = sources[int(rng.integers(0, len(sources)))]
            w, h = photo.size
            side = float(rng.uniform(0.4, 0.9))
            x, y = rng.uniform(0, 1 - side, 2)
            box = (int(x * w), int(y * h), int((x + side) * w), int((y + side) * h))
            image = photo.crop(box).resize((512, 512), Image.Resampling.BILINEAR)
            image = ImageEnhance.Brightness(image).enhance(float(rng.uniform(0.8, 1.2)))
            made.append(image) if len(made) < 500 else None
        image.save(folder / f"img{index:06d}.jpg", quality=int(rng.integers(75, 95)))


def speed(count: int, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "images"
        folder.mkdir()
        make_speed_set(folder, count)
        for path in folder.iterdir():
            path.read_bytes()  # both sides start from a warm page cache
        rows = []
        for r in range(rounds):
            before = cpu_pressure()
            ours_s, _ = ours(folder, Path(tmp) / f"run{r}")
            theirs_s, _ = peer(folder)
            rows.append({"ours_s": ours_s, "imagededup_s": theirs_s, "ratio": theirs_s / ours_s,
                         "pressure": f"{before} -> {cpu_pressure()}"})  # fmt: skip
    return {"images": count, "rounds": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quality", action="store_true")
    parser.add_argument("--speed", type=int, nargs="*", default=[])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(json.dumps({"cpus": os.cpu_count(), "pressure": cpu_pressure()}), flush=True)
    if args.quality:
        print(json.dumps({"quality": quality()}), flush=True)
    for count in args.speed:
        print(json.dumps({"speed": speed(count, args.rounds)}), flush=True)


if __name__ == "__main__":
    main()
