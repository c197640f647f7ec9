"""Reader for the Karpathy-split caption files of COCO and Flickr30K (supp. Tables 1-2).

`dataset_coco.json` / `dataset_flickr30k.json` hold {"images": [entry, ...]}; an entry has
`filename`, `split` (train, val, test or restval), `sentences` (a list of {"raw": caption, ...})
and, in the COCO file, `filepath` (the folder, e.g. val2014). The standard retrieval test sets
are the `test` entries: 5,000 COCO and 1,000 Flickr30K images with 5 captions each (a few COCO
images have 6 or 7; the first `captions_per_image` are kept and the rest counted).

An entry's image is `<images_dir>/<filepath>/<filename>`, or `<images_dir>/<filename>` when that
is where the file is (a flattened COCO folder, or Flickr30K). Malformed entries (not an object,
no filename, no usable sentence) become rejection records; a missing image is an error, or with
on_missing="skip" a rejection. Nothing is dropped silently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lenses_data.schemas import LENS_NAMES
from training.external.common import ExternalRejection, OnMissing, RetrievalSet

KARPATHY_SPLITS = ("train", "val", "test", "restval")


@dataclass
class KarpathySet(RetrievalSet):
    """A retrieval set plus each image's file name (for image-side prompt tables)."""

    image_names: list[str] | None = None
    n_captions_beyond_limit: int = 0


def _load_entries(json_path: Path) -> list[Any]:
    if not json_path.is_file():
        raise FileNotFoundError(f"Karpathy caption file not found: {json_path}")
    try:
        data = json.loads(json_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{json_path} is not valid JSON: {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise ValueError(f"{json_path} lacks the Karpathy layout: a top-level object with an 'images' list")
    return data["images"]


def _malformed(row: int, entry: Any) -> ExternalRejection | None:
    """The reason an entry cannot be read, or None."""
    if not isinstance(entry, dict):
        return ExternalRejection(row, "malformed_entry", f"entry {row} is not an object: {entry!r:.80}")
    if not isinstance(entry.get("filename"), str) or not entry["filename"].strip():
        return ExternalRejection(row, "malformed_entry", f"entry {row} has no filename")
    if entry.get("split") not in KARPATHY_SPLITS:
        return ExternalRejection(row, "malformed_entry", f"entry {row} has split {entry.get('split')!r}")
    if not isinstance(entry.get("sentences"), list):
        return ExternalRejection(row, "malformed_entry", f"entry {row} has no sentences list")
    return None


def _captions(row: int, entry: dict) -> tuple[list[str], ExternalRejection | None]:
    """The entry's non-empty `raw` captions, and a rejection when it has none."""
    texts = [
        s["raw"].strip()
        for s in entry["sentences"]
        if isinstance(s, dict) and isinstance(s.get("raw"), str) and s["raw"].strip()
    ]
    if not texts:
        return [], ExternalRejection(
            row, "no_caption", f"entry {row} ({entry['filename']}) has no raw caption"
        )
    return texts, None


def _image_path(root: Path, entry: dict) -> tuple[Path | None, list[Path]]:
    """(the existing image file or None, the paths tried)."""
    tried = []
    if isinstance(entry.get("filepath"), str) and entry["filepath"]:
        tried.append(root / entry["filepath"] / entry["filename"])
    tried.append(root / entry["filename"])
    return next((p for p in tried if p.is_file()), None), tried


def read_karpathy(
    json_path: str | Path,
    images_dir: str | Path,
    *,
    split: str = "test",
    captions_per_image: int | None = 5,
    on_missing: OnMissing = "error",
) -> KarpathySet:
    """The `split` entries of a Karpathy caption file as a retrieval set (every caption Literal)."""
    if split not in KARPATHY_SPLITS:
        raise ValueError(f"split must be one of {KARPATHY_SPLITS}, got {split!r}")
    if captions_per_image is not None and captions_per_image < 1:
        raise ValueError(f"captions_per_image must be at least 1 or None, got {captions_per_image}")
    path, root = Path(json_path), Path(images_dir)
    entries = _load_entries(path)
    if not root.is_dir():
        raise FileNotFoundError(f"image folder not found: {root}")
    out = KarpathySet([], [], np.zeros(0, np.int64), np.zeros(0, np.int64), [], image_names=[])
    cap_img: list[int] = []
    for row, entry in enumerate(entries):
        bad = _malformed(row, entry)
        if bad is None and entry["split"] != split:
            continue
        texts, no_caption = _captions(row, entry) if bad is None else ([], None)
        if bad is not None or no_caption is not None:
            out.rejections.append(bad or no_caption)
            continue
        image, tried = _image_path(root, entry)
        if image is None:
            msg = f"entry {row}: image not found, tried {[str(p) for p in tried]}"
            if on_missing == "error":
                raise FileNotFoundError(msg)
            out.rejections.append(ExternalRejection(row, "image_missing", msg))
            continue
        if captions_per_image is not None and len(texts) > captions_per_image:
            out.n_captions_beyond_limit += len(texts) - captions_per_image
            texts = texts[:captions_per_image]
        out.texts += texts
        cap_img += [len(out.image_paths)] * len(texts)
        out.image_paths.append(str(image))
        out.image_names.append(entry["filename"])
    if not out.image_paths:
        raise ValueError(f"no usable {split!r} entries in {path} ({len(out.rejections)} rejected)")
    out.caption_image = np.asarray(cap_img, dtype=np.int64)
    out.caption_lens = np.full(len(out.texts), LENS_NAMES.index("Literal"), dtype=np.int64)
    return out
