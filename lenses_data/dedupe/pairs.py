"""The near-duplicate pairs the dedupe stage writes (`RUN/dedupe/pairs.parquet`): read by the split
stage's leakage report and by the build report, so neither imports the dedupe stage."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from lenses_data import io
from lenses_data.config.pipeline import DEDUPE
from lenses_data.schemas import DedupePair

PAIRS = "pairs.parquet"


def read_pairs(run: str | Path) -> pd.DataFrame:
    return io.read_shard(io.stage_dir(run, DEDUPE) / PAIRS, DedupePair)
