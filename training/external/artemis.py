"""Reader for ArtEmis (main Table 5): affective captions of WikiArt paintings.

The annotation CSV has columns art_style, painting, emotion, utterance, repetition; the image of
a row is `<wikiart_dir>/<art_style>/<painting>.jpg`. Every utterance is a caption of lens
Emotional; images are the distinct (art_style, painting) pairs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lenses_data.schemas import LENS_NAMES
from training.external.common import ExternalRejection, OnMissing, RetrievalSet, read_csv

ARTEMIS_COLUMNS = ("art_style", "painting", "emotion", "utterance", "repetition")


def read_artemis(
    csv_path: str | Path,
    wikiart_dir: str | Path,
    *,
    on_missing: OnMissing = "error",
    split: str | None = None,
) -> RetrievalSet:
    """ArtEmis annotations as a retrieval set (optionally only rows whose `split` column matches)."""
    df = read_csv(csv_path, ARTEMIS_COLUMNS, "ArtEmis")
    if split is not None:
        if "split" not in df.columns:
            raise ValueError(f"split={split!r} requested but {csv_path} has no 'split' column")
        df = df[df["split"] == split]
    root = Path(wikiart_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"WikiArt image folder not found: {root}")
    emotional = LENS_NAMES.index("Emotional")
    index: dict[tuple[str, str], int] = {}
    paths, texts, cap_img, rejections = [], [], [], []
    for row, (style, painting, utterance) in enumerate(
        zip(df["art_style"], df["painting"], df["utterance"], strict=True)
    ):
        if not isinstance(utterance, str) or not utterance.strip():
            rejections.append(ExternalRejection(row, "empty_utterance", f"row {row} has no utterance"))
            continue
        key = (str(style), str(painting))
        if key not in index:
            path = root / key[0] / f"{key[1]}.jpg"
            if not path.is_file():
                msg = f"row {row}: image {path} not found"
                if on_missing == "error":
                    raise FileNotFoundError(msg)
                rejections.append(ExternalRejection(row, "image_missing", msg))
                continue
            index[key] = len(paths)
            paths.append(str(path))
        texts.append(utterance)
        cap_img.append(index[key])
    if not texts:
        raise ValueError(f"no usable ArtEmis rows in {csv_path} ({len(rejections)} rejected)")
    return RetrievalSet(paths, texts, np.asarray(cap_img), np.full(len(texts), emotional), rejections)
