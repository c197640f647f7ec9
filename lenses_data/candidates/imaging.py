"""Image decode helpers: safe inspection for ingest and RGB loading for later stages.

Everything here works on bytes and plain values so it can run in worker processes; it imports
only Pillow, numpy and the standard library. `inspect_image_bytes` refuses a file before it
allocates pixels (decompression bombs are caught from the header size), decodes JPEGs in
draft mode (DCT scaling: the whole entropy-coded stream is still read, so truncation is still
detected, at a fraction of the cost), and reports what a later stage needs to know.

Later stages should open candidate images with `load_rgb`, which applies the same conversions
(EXIF orientation, CMYK, 16-bit, palette with transparency, first frame of an animation).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import stat
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image, ImageOps

from lenses_data.candidates.rejection import ImageRejected
from lenses_data.candidates.view_hash import view_codes, view_scale

# Reason codes of decode rejections (machine-readable; the message carries the detail).
EMPTY_FILE = "empty_file"
FILE_NOT_FOUND = "file_not_found"
SYMLINK_LOOP = "symlink_loop"
UNREADABLE_PATH = "unreadable_path"
FILE_TOO_LARGE = "file_too_large"
NOT_AN_IMAGE = "not_an_image"
TRUNCATED_IMAGE = "truncated_image"
CORRUPT_IMAGE = "corrupt_image"
DECOMPRESSION_BOMB = "decompression_bomb"
TOO_SMALL = "too_small"
EXTREME_ASPECT_RATIO = "extreme_aspect_ratio"
CONVERSION_FAILED = "conversion_failed"

# Where Pillow's getexif() finds an orientation (EXIF, or XMP's tiff:Orientation).
_ORIENTATION_SOURCES = frozenset({"exif", "xmp", "XML:com.adobe.xmp", "Raw profile type exif"})
# EXIF orientations that swap width and height (rotations by 90 or 270 degrees).
_TRANSPOSING_ORIENTATIONS = {5, 6, 7, 8}
_EXIF_ORIENTATION_TAG = 0x0112

FORMAT_EXTENSIONS = {"JPEG": "jpg", "MPO": "jpg", "PNG": "png", "GIF": "gif", "WEBP": "webp", "BMP": "bmp"}
FORMAT_EXTENSIONS["TIFF"] = "tif"


@dataclass(frozen=True)
class DecodeLimits:
    min_side: int
    max_aspect_ratio: float
    max_pixels: int
    max_file_bytes: int
    allowed_formats: tuple[str, ...]


@dataclass(frozen=True)
class ImageFacts:
    width: int  # after EXIF orientation
    height: int
    format: str
    mode: str
    orientation_applied: bool
    converted_from: str | None
    codes: dict[str, Any] | None = None  # perceptual hashes of the decoded view (see hash_view)


def read_file_bytes(path: str | Path, max_bytes: int) -> bytes:
    """Read a local file, turning every way it can fail into an `ImageRejected`."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):  # a FIFO or device would block or never end
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise ImageRejected(UNREADABLE_PATH, f"{kind}: {path}")
        size = info.st_size
        if size > max_bytes:
            raise ImageRejected(FILE_TOO_LARGE, f"file has {size} bytes, limit is {max_bytes}")
        with open(path, "rb") as handle:
            return handle.read(max_bytes + 1)
    except FileNotFoundError:
        raise ImageRejected(FILE_NOT_FOUND, f"no such file: {path}") from None
    except IsADirectoryError:
        raise ImageRejected(UNREADABLE_PATH, f"is a directory, not a file: {path}") from None
    except PermissionError:
        raise ImageRejected(UNREADABLE_PATH, f"permission denied: {path}") from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ImageRejected(SYMLINK_LOOP, f"symbolic link loop: {path}") from None
        raise ImageRejected(UNREADABLE_PATH, f"cannot read {path}: {error.strerror or error}") from None


@contextlib.contextmanager
def _bomb_guard(max_pixels: int) -> Iterator[None]:
    """Make Pillow's own bomb check use our limit and raise instead of warn (restored after)."""
    previous = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = max_pixels
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            yield
    finally:
        Image.MAX_IMAGE_PIXELS = previous


def _open(data: bytes, limits: DecodeLimits) -> Image.Image:
    Image.init()  # register every plugin: `formats=` only knows the ones loaded so far
    # Names Pillow has no opener for are ignored (e.g. MPO, which the JPEG opener returns).
    formats = [name for name in limits.allowed_formats if name in Image.OPEN]
    try:
        return Image.open(io.BytesIO(data), formats=formats)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
        raise ImageRejected(
            DECOMPRESSION_BOMB, f"refused from the header, before decoding: {error}"
        ) from None
    except Image.UnidentifiedImageError:
        allowed = ", ".join(limits.allowed_formats)
        raise ImageRejected(
            NOT_AN_IMAGE, f"content is not an image in a supported format ({allowed})"
        ) from None
    except Exception as error:  # a malformed header can raise nearly anything inside a plugin
        reason = TRUNCATED_IMAGE if "truncated" in str(error).lower() else CORRUPT_IMAGE
        raise ImageRejected(reason, f"cannot parse image header: {error!r}") from None


def _check_geometry(width: int, height: int, limits: DecodeLimits) -> None:
    if width <= 0 or height <= 0:
        raise ImageRejected(CORRUPT_IMAGE, f"header declares an empty image {width}x{height}")
    if width * height > limits.max_pixels:
        raise ImageRejected(
            DECOMPRESSION_BOMB,
            f"header declares {width}x{height} = {width * height} pixels, limit is {limits.max_pixels}",
        )
    if min(width, height) < limits.min_side:
        raise ImageRejected(TOO_SMALL, f"{width}x{height}: shorter side below {limits.min_side} px")
    ratio = max(width, height) / min(width, height)
    if ratio > limits.max_aspect_ratio:
        raise ImageRejected(
            EXTREME_ASPECT_RATIO,
            f"{width}x{height}: aspect ratio {ratio:.2f} above {limits.max_aspect_ratio}",
        )


def _decode(image: Image.Image) -> None:
    """Decode the pixel data (first frame only); JPEGs at the hash view's scale (1/2..1/8)."""
    width, height = image.size
    if image.format in ("JPEG", "MPO"):
        # Grayscale draft of an RGB JPEG skips colour conversion; the stream is still fully read.
        # The DCT scale keeps the short side >= VIEW_MIN_SIDE px: that is the image hashed.
        mode = "L" if image.mode == "RGB" else None
        scale = view_scale(width, height)
        image.draft(mode, (max(1, width // scale), max(1, height // scale)))
    try:
        image.load()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
        raise ImageRejected(DECOMPRESSION_BOMB, str(error)) from None
    except OSError as error:
        text = str(error)
        reason = TRUNCATED_IMAGE if "truncated" in text or "broken data stream" in text else CORRUPT_IMAGE
        raise ImageRejected(reason, f"decoding failed: {text}") from None
    except Exception as error:
        raise ImageRejected(CORRUPT_IMAGE, f"decoding failed: {error!r}") from None


def exif_orientation(image: Image.Image) -> int:
    """The EXIF orientation tag (1..8), or 1 when absent or invalid."""
    if image.format in ("JPEG", "MPO") and not _ORIENTATION_SOURCES & image.info.keys():
        return 1  # a JPEG's APP segments are all read at open: nothing could hold an orientation
    try:
        value = image.getexif().get(_EXIF_ORIENTATION_TAG, 1)
    except Exception:  # malformed EXIF must not reject an otherwise good image
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def inspect_image_bytes(data: bytes, limits: DecodeLimits) -> ImageFacts:
    """Check that bytes are a usable image; raise `ImageRejected` with the reason otherwise."""
    if not data:
        raise ImageRejected(EMPTY_FILE, "file is empty (0 bytes)")
    if len(data) > limits.max_file_bytes:
        raise ImageRejected(FILE_TOO_LARGE, f"{len(data)} bytes, limit is {limits.max_file_bytes}")
    with _bomb_guard(limits.max_pixels):
        image = _open(data, limits)
        with image:
            width, height = image.size
            _check_geometry(width, height, limits)  # before any pixel is allocated
            fmt, mode = image.format or "unknown", image.mode
            _decode(image)
            orientation = exif_orientation(image)
            try:
                # A greyscale image (or the greyscale draft of an RGB JPEG) is hashed as it is: the
                # hash's RGB -> L conversion of its RGB copy would give back the same pixels exactly.
                view = image if image.mode == "L" else to_rgb(image)
            except Exception as error:
                raise ImageRejected(CONVERSION_FAILED, f"cannot convert {mode} to RGB: {error!r}") from None
            codes = hash_view(view, orientation)
    if orientation in _TRANSPOSING_ORIENTATIONS:
        width, height = height, width
    return ImageFacts(
        width=width,
        height=height,
        format=fmt,
        mode=mode,
        orientation_applied=orientation != 1,
        converted_from=None if mode == "RGB" else mode,
        codes=codes,
    )


_TRANSPOSE = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180,
              4: Image.Transpose.FLIP_TOP_BOTTOM, 5: Image.Transpose.TRANSPOSE,
              6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE, 8: Image.Transpose.ROTATE_90}  # fmt: skip


def hash_view(rgb: Image.Image, orientation: int = 1) -> dict[str, Any] | None:
    """Perceptual hashes of the decoded image (RGB or L), reduced so the short side is >=
    VIEW_MIN_SIDE (a JPEG is already decoded at that DCT scale) and turned upright like `load_rgb`.

    None when hashing fails: the image itself is fine; dedupe then hashes it on demand.
    """
    try:
        scale = view_scale(*rgb.size)
        view = rgb.reduce(scale) if scale > 1 else rgb
        if orientation in _TRANSPOSE:
            view = view.transpose(_TRANSPOSE[orientation])
        return view_codes(view).as_dict()
    except Exception:
        return None


def to_rgb(image: Image.Image) -> Image.Image:
    """Convert any decoded mode to 8-bit RGB, flattening transparency onto white."""
    if image.mode == "RGB":
        return image
    if image.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        return _wide_gray_to_rgb(image)
    has_alpha = image.mode in ("RGBA", "LA", "PA", "La", "RGBa") or (
        image.mode == "P" and "transparency" in image.info
    )
    if has_alpha:
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")


def _wide_gray_to_rgb(image: Image.Image) -> Image.Image:
    """16/32-bit grayscale: scale to 8 bits instead of clipping (Pillow's convert clips at 255)."""
    import numpy as np

    array = np.asarray(image).astype(np.float64)
    peak = 65535.0 if image.mode.startswith("I;16") else max(float(array.max()), 1.0)
    scaled = np.clip(array * (255.0 / peak), 0, 255).astype(np.uint8)
    return Image.fromarray(scaled, mode="L").convert("RGB")


def load_rgb(
    source: str | Path | bytes, max_pixels: int = 89_478_485, draft: tuple[int, int] | None = None
) -> Image.Image:
    """Open an accepted candidate as an upright 8-bit RGB image (first frame of animations).

    `draft` (width, height): a JPEG is decoded at the largest DCT reduction (1/2, 1/4, 1/8) that
    keeps its stored width and height >= these; other formats are decoded at full size.
    Thread-safe: unlike ingest's check it leaves Pillow's global limit and warning filters alone.
    """
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    with Image.open(io.BytesIO(data)) as image:
        width, height = image.size
        if width * height > max_pixels:
            raise ImageRejected(DECOMPRESSION_BOMB, f"{width}x{height} is above {max_pixels} pixels")
        if draft is not None and image.format in ("JPEG", "MPO"):
            image.draft(None, draft)  # mode None: colour as stored; only the scale changes
        image.load()
        upright = ImageOps.exif_transpose(image) or image
        return to_rgb(upright).copy()


def facts_as_dict(facts: ImageFacts) -> dict[str, Any]:
    return {
        "width": facts.width,
        "height": facts.height,
        "format": facts.format,
        "mode": facts.mode,
        "orientation_applied": facts.orientation_applied,
        "converted_from": facts.converted_from,
        **(facts.codes or {}),
    }


# --- worker entry point (runs in decode processes) --------------------------------------------

DECODE_ERROR = "decode_error"


def decode_task(task: dict[str, Any], limits: DecodeLimits, images_dir: str | None) -> dict[str, Any]:
    """Read, hash, inspect and (for in-memory bytes) materialise one image; never raises.

    `task` has `seq`, and either `path` (a local file) or `data` (bytes to materialise).
    Returns a plain dict: `ok` plus facts, or `reason`/`message` (and the id when known).
    """
    out: dict[str, Any] = {"seq": task["seq"], "ok": False, "image_id": None}
    try:
        data = (
            task["data"]
            if task.get("data") is not None
            else read_file_bytes(task["path"], limits.max_file_bytes)
        )
        digest = hashlib.sha256(data).hexdigest()
        out.update(sha256=digest, image_id=digest[:16], n_bytes=len(data))
        facts = inspect_image_bytes(data, limits)
        path = task.get("path")
        if path is None:
            path = _materialise(data, digest[:16], facts.format, images_dir)
        out.update(facts_as_dict(facts), ok=True, path=path)
    except ImageRejected as rejected:
        out.update(reason=rejected.reason, message=rejected.message)
    except Exception as error:  # a decoder bug must cost one image, not the run
        out.update(reason=DECODE_ERROR, message=f"unexpected error: {error!r}")
    return out


def decode_batch(
    tasks: list[dict[str, Any]], limits: DecodeLimits, images_dir: str | None
) -> list[dict[str, Any]]:
    return [decode_task(task, limits, images_dir) for task in tasks]


def _materialise(data: bytes, image_id: str, fmt: str, images_dir: str | None) -> str:
    """Write bytes to images_dir/<id[:2]>/<id>.<ext> atomically; identical bytes share one file."""
    if images_dir is None:
        raise ValueError("bytes without a local file need an images directory to be materialised")
    ext = FORMAT_EXTENSIONS.get(fmt, fmt.lower())
    target = Path(images_dir) / image_id[:2] / f"{image_id}.{ext}"
    if target.exists() and target.stat().st_size == len(data):
        return str(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide the image from other users of the run
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return str(target)
