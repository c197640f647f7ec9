"""Report thumbnails: 256 px WebP per image id, made once (an existing file is kept)."""

from __future__ import annotations

import io as stdio
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lenses_data import io

log = logging.getLogger(__name__)
THUMBS = "thumbs"
THUMB_PX = 256
WEBP_QUALITY = 70


def thumbnail_bytes(path: str, px: int = THUMB_PX) -> bytes:
    from PIL import Image, ImageOps

    with Image.open(path) as image:
        image.draft("RGB", (px, px))  # JPEG: decode at a reduced scale, not the full photo
        upright = ImageOps.exif_transpose(image).convert("RGB")
    upright.thumbnail((px, px))
    buffer = stdio.BytesIO()
    upright.save(buffer, format="WEBP", quality=WEBP_QUALITY)
    return buffer.getvalue()


def _one(image_id: str, path: str, folder: Path) -> str | None:
    target = folder / f"{image_id}.webp"
    if not target.exists():
        try:
            io.atomic_write_bytes(target, thumbnail_bytes(path))
        except (OSError, ValueError, SyntaxError) as error:  # gone, changed or unreadable since ingest
            log.warning("report: no thumbnail for %s (%s): %s", image_id, path, error)
            return None
    return f"{THUMBS}/{target.name}"


def make_thumbnails(paths: dict[str, str], out: Path, workers: int = 4) -> dict[str, str]:
    """image id -> thumbnail path relative to `out`, for every image that could be read."""
    folder = out / THUMBS
    folder.mkdir(parents=True, exist_ok=True)
    items = [(i, p) for i, p in sorted(paths.items()) if isinstance(p, str) and p]
    with ThreadPoolExecutor(max_workers=workers) as pool:  # Pillow decodes and encodes without the GIL
        done = list(pool.map(lambda item: _one(item[0], item[1], folder), items))
    return {image_id: rel for (image_id, _), rel in zip(items, done, strict=True) if rel}
