"""What the external benchmark readers share: rejection records and checked CSV reading.

Readers only read local files when they are present; nothing is downloaded. Bad input gives a
clear error (missing file, missing columns, unparsable cells) or, with on_missing="skip", a
rejection record per unusable row, never a silent drop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

OnMissing = Literal["error", "skip"]


@dataclass
class ExternalRejection:
    row: int
    reason: str  # machine-readable code
    message: str


@dataclass
class RetrievalSet:
    """Images and captions for `training.evaluation.metrics.retrieval.retrieval_metrics`."""

    image_paths: list[str]
    texts: list[str]
    caption_image: np.ndarray
    caption_lens: np.ndarray
    rejections: list[ExternalRejection] = field(default_factory=list)


def read_csv(path: str | Path, required: Sequence[str], what: str) -> pd.DataFrame:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{what} file not found: {p}")
    df = pd.read_csv(p)
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ValueError(f"{what} file {p} lacks columns {missing}; has {list(df.columns)}")
    return df
