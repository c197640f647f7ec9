"""Row helpers shared by the annotation stages (filter, generate, rules, validate, visual_validate):
rejection rows, record frames, the split and path lookups. The stages themselves derive from
`lenses_data.stages.base.ShardedStage`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel

from lenses_data import io
from lenses_data.schemas import LensText, Rejection, SplitAssignment, column_names

TEXT_COLUMNS: tuple[str, ...] = tuple(column_names(LensText))


def rejection(
    stage: str,
    record_id: str,
    reason: str,
    message: str,
    *,
    image_id: str | None = None,
    raw: str | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    return Rejection(
        stage=stage,
        record_id=record_id,
        reason=reason,
        message=message,
        image_id=image_id,
        raw=raw,
        source=source,
    ).model_dump()


def rejections_frame(rows: Iterable[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=column_names(Rejection))


def concat_rejections(*frames: pd.DataFrame) -> pd.DataFrame:
    parts = [f for f in frames if len(f)]
    return pd.concat(parts, ignore_index=True) if parts else rejections_frame([])


def records_frame(rows: Iterable[dict[str, Any]], model: type[BaseModel]) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=column_names(model))


def failed_result_rejection(stage: str, record_id: str, result: Any, image_id: str | None) -> dict[str, Any]:
    """A failed ModelResult as a rejection row: its reason code, message and raw answer kept."""
    return rejection(
        stage,
        record_id,
        result.error_code or "model_error",
        f"{result.error_message or 'model call failed'} (after {result.attempts} attempt(s))",
        image_id=image_id,
        raw=result.raw,
    )


def split_lookup(run: Path) -> dict[str, str]:
    """image_id -> split, for the images the split stage selected."""
    frame = io.read_stage(run, "split", SplitAssignment)
    return dict(zip(frame["image_id"], frame["split"].astype(str), strict=True))


def ingest_paths(run: Path, shard: int) -> dict[str, str]:
    """image_id -> local path, from the ingest shard with the same index (shards stay aligned)."""
    path = io.shard_path(run, "ingest", shard)
    if path.exists():
        frame = io.read_shard(path)
    else:  # shard numbering changed upstream: fall back to the whole stage
        frame = io.read_stage(run, "ingest")
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
