"""Row helpers shared by the annotation stages (filter, generate, rules, validate, visual_validate):
record and rejection frames, the split and path lookups (rejection rows:
`lenses_data.annotation.rejection_rows`). The stages themselves derive from
`lenses_data.stages.base.ShardedStage`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel

from lenses_data import io
from lenses_data.config.pipeline import INGEST, SPLIT
from lenses_data.schemas import LensText, Rejection, SplitAssignment, column_names

TEXT_COLUMNS: tuple[str, ...] = tuple(column_names(LensText))


def rejections_frame(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=column_names(Rejection))


def concat_rejections(*frames: pd.DataFrame) -> pd.DataFrame:
    parts = [f for f in frames if len(f)]
    return pd.concat(parts, ignore_index=True) if parts else rejections_frame([])


def records_frame(rows: Iterable[dict[str, Any]], model: type[BaseModel]) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=column_names(model))


def split_lookup(run: Path) -> dict[str, str]:
    """image_id -> split, for the images the split stage selected."""
    frame = io.read_stage(run, SPLIT, SplitAssignment)
    return dict(zip(frame["image_id"], frame["split"].astype(str), strict=True))


def ingest_paths(run: Path, shard: int) -> dict[str, str]:
    """image_id -> local path, from the ingest shard with the same index (shards stay aligned)."""
    path = io.shard_path(run, INGEST, shard)
    if path.exists():
        frame = io.read_shard(path)
    else:  # shard numbering changed upstream: fall back to the whole stage
        frame = io.read_stage(run, INGEST)
    return dict(zip(frame["image_id"], frame["path"], strict=True))


def lens_text_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    rows = frame.to_dict(orient="records")
    for row in rows:
        row["lens"] = str(row["lens"])
        row["split"] = None if row.get("split") is None or pd.isna(row["split"]) else str(row["split"])
        row["idioms"] = list(row.get("idioms") if row.get("idioms") is not None else [])
        if row.get("original_text") is not None and pd.isna(row["original_text"]):
            row["original_text"] = None
    return rows
