"""What the export's manifest.json records besides the tables: records in/out/rejected per stage,
package versions, the models of each role, and the run's GPU-hour plan (`lenses plan`)."""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from lenses_data import io
from lenses_data.config.pipeline import EXPORT, FILTER, GENERATE
from lenses_data.config.roles import ROLE_OF_STAGE, ROLES
from lenses_data.schemas import StageCount
from lenses_data.stages.registry import STAGES

if TYPE_CHECKING:
    from lenses_data.config import PipelineConfig

# The export stage's logger: the plan's warning is the export's.
log = logging.getLogger("lenses_data.stages.export")
# Every declared stage before the export itself, in the declared order.
COUNTED_STAGES = tuple(name for name in STAGES if name != EXPORT)
PACKAGES = (
    "lenses-data",
    "pandas",
    "pyarrow",
    "pydantic",
    "openai",
    "prefect",
    "pillow",
    "imagehash",
    "numpy",
)


def stage_counts(run: Path, stages: Sequence[str] = COUNTED_STAGES) -> list[StageCount]:
    """Records in/out/rejected per stage, the same numbers as the build's funnel.

    Shard-mapped stages record them in their success marker. Ingest, dedupe and split write
    their own summaries there instead, so their counts come from their Parquet files: out = rows
    (dedupe: the rows it kept), rejected = rows of its rejection files, in = out + rejected.
    `stages`: the run's stages before export (a user's own included), default the declared ones.
    """
    counts = []
    for stage in stages:
        marker = io.read_marker(run, stage)
        if marker is None:
            continue
        stats = marker.get("stats", {})
        if "records_in" in stats:
            records_in, records_out = _as_count(stats.get("records_in")), _as_count(stats.get("records_out"))
            rejected = _as_count(stats.get("rejected"))
        else:
            records_out, rejected = _rows_kept(run, stage, marker["shards"]), _rows_rejected(run, stage)
            records_in = records_out + rejected
        counts.append(
            StageCount(stage=stage, records_in=records_in, records_out=records_out, rejected=rejected)
        )
    return counts


def _rows_kept(run: Path, stage: str, shards: list[str]) -> int:
    import pyarrow.parquet as pq

    total = 0
    for name in shards:
        path = io.stage_dir(run, stage) / name
        if "kept" in pq.read_schema(path).names:  # dedupe keeps every image, flagged kept or not
            total += int(pq.read_table(path, columns=["kept"]).column("kept").to_pandas().sum())
        else:
            total += pq.read_metadata(path).num_rows
    return total


def _rows_rejected(run: Path, stage: str) -> int:
    import pyarrow.parquet as pq

    paths = sorted(io.rejection_path(run, stage, 0).parent.glob(f"{stage}-part-*.parquet"))
    return sum(pq.read_metadata(path).num_rows for path in paths)


def _as_count(value: Any) -> int:
    """Stage stats are written by several stages: a count, or counts per reason."""
    if isinstance(value, dict):
        return sum(_as_count(v) for v in value.values())
    return int(value) if isinstance(value, int | float) else 0


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def model_info(
    config: PipelineConfig, texts: pd.DataFrame, filter_models: set[str]
) -> dict[str, dict[str, Any]]:
    info: dict[str, dict[str, Any]] = {}
    for role in ROLES:
        settings = config.models.role(role)
        info[role] = {
            "model": settings.model,
            "revision": settings.serve.revision,
            "base_urls": settings.base_urls,
        }
    # The models that answered: the filter's decisions, and the generated texts' (validators keep them).
    info[ROLE_OF_STAGE[FILTER]]["answered_by"] = sorted(filter_models)
    info[ROLE_OF_STAGE[GENERATE]]["answered_by"] = sorted(set(texts["model"])) if len(texts) else []
    return info


def gpu_plan(run: Path, config: PipelineConfig, stats: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The run's GPU-hour plan for the card, or None when it cannot be made (no model stage ran);
    the export never fails for want of a plan. `stats`: the run's `read_stage_stats`, when already
    read."""
    from lenses_data.plan import plan_for_card

    try:
        return plan_for_card(run, config, stats=stats)
    except (ValueError, KeyError, FileNotFoundError, ZeroDivisionError) as error:
        log.warning("export: no GPU-hour plan for the card (%s)", error)
        return None
