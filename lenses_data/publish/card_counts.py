"""The dataset card's count tables: Table 1 (split x lens) for captions and prompts, the funnel from
candidate images to final texts, and rejections by stage and reason; saved as JSON next to the card
(`card_counts.json`), which the build report (lenses_data.publish.report) reads instead of recounting."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from lenses_data import io
from lenses_data.config.pipeline import EXPORT, FunnelStep, StageSpec, builtin
from lenses_data.schemas import LENS_NAMES, SPLIT_NAMES

# The card's count tables as JSON next to it: the build report (lenses_data.publish.report) shows these same
# numbers without recounting the run (recounting reads every text of four stages).
COUNTS_FILE = "card_counts.json"


def split_lens_table(images: pd.DataFrame, texts: pd.DataFrame, noun: str) -> pd.DataFrame:
    """Table 1 of the paper: per split, images, texts, and texts per lens; a Total row."""
    rows = []
    for split in [*SPLIT_NAMES, "Total"]:
        imgs = images if split == "Total" else images[images["split"] == split]
        part = texts if split == "Total" else texts[texts["split"] == split]
        lens_counts = part["lens"].astype(str).value_counts()
        row = {"Split": split.capitalize(), "# Images": len(imgs), f"# {noun}": len(part)}
        row.update({lens: int(lens_counts.get(lens, 0)) for lens in LENS_NAMES})
        rows.append(row)
    return pd.DataFrame(rows)


def _count(
    run: Path, stage: str, column: str | None = None, extra: tuple[str, ...] = ()
) -> pd.DataFrame | None:
    """The stage's `column` (plus `extra`) over all its shards, or None when it has no such column.
    Only those columns are read: the funnel counts rows, and the text stages hold ~15 texts per image."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        paths = io.stage_shards(run, stage, require_complete=False)
        if column is None:
            return pd.DataFrame(index=range(sum(pq.read_metadata(path).num_rows for path in paths)))
        wanted = [column, *extra]
        if not paths or any(not set(wanted) <= set(pq.read_schema(path).names) for path in paths):
            return None
        return pa.concat_tables([pq.read_table(path, columns=wanted) for path in paths]).to_pandas()
    except (FileNotFoundError, ValueError):
        return None


def declared_steps(specs: Iterable[StageSpec] | None = None) -> list[tuple[str, FunnelStep]]:
    """(stage, step) of the funnel, in pipeline order: the declared stages', or those of a run
    (`run_specs(config)`, a user's own stages included)."""
    specs = builtin().values() if specs is None else specs
    return [(spec.name, step) for spec in specs for step in spec.funnel]


def _step_row(run: Path, stage: str, step: FunnelStep) -> dict[str, Any] | None:
    """One funnel row of `stage`'s files, or None when the stage has none (not run, or no such column)."""
    if step.count == "rows":
        frame = _count(run, stage)
        return None if frame is None else {"Step": f"{stage}: {step.label}", "Images": len(frame)}
    if step.count == "texts":
        texts = _count(run, stage, "kind", ("image_id",))
        if texts is None:
            return None
        kinds = texts["kind"].value_counts()
        return {
            "Step": f"{stage}: {step.label}",
            "Images": texts["image_id"].nunique(),
            "Prompts": int(kinds.get("prompt", 0)),
            "Captions": int(kinds.get("caption", 0)),
        }
    flags = _count(run, stage, step.count)  # a boolean column: its true rows
    return (
        None if flags is None else {"Step": f"{stage}: {step.label}", "Images": int(flags[step.count].sum())}
    )


def funnel(
    run: Path,
    images: pd.DataFrame,
    captions: pd.DataFrame,
    prompts: pd.DataFrame,
    steps: list[tuple[str, FunnelStep]] | None = None,
) -> pd.DataFrame:
    """From candidate images to final texts, stage by stage (`steps`: default the declared ones)."""
    rows = [row for stage, step in steps or declared_steps() if (row := _step_row(run, stage, step))]
    rows.append(
        {
            "Step": f"{EXPORT}: final dataset",
            "Images": len(images),
            "Prompts": len(prompts),
            "Captions": len(captions),
        }
    )
    table = pd.DataFrame(rows, columns=["Step", "Images", "Prompts", "Captions"]).astype(object)
    return table.where(table.notna(), "")


def rejection_table(rejections: pd.DataFrame) -> pd.DataFrame:
    if rejections.empty:
        return pd.DataFrame({"Stage": [], "Reason": [], "Rows": [], "Records": []})
    grouped = rejections.groupby(["stage", "reason"]).agg(
        Rows=("record_id", "size"), Records=("record_id", "nunique")
    )
    table = grouped.reset_index().rename(columns={"stage": "Stage", "reason": "Reason"})
    return table.sort_values(["Stage", "Rows"], ascending=[True, False]).reset_index(drop=True)


def count_tables(
    run: Path,
    images: pd.DataFrame,
    captions: pd.DataFrame,
    prompts: pd.DataFrame,
    rejections: pd.DataFrame,
    steps: list[tuple[str, FunnelStep]] | None = None,
) -> dict[str, pd.DataFrame]:
    """Table 1 for captions and prompts, the funnel (`steps`: the run's, default the declared
    stages'), and rejections by stage and reason."""
    return {
        "captions": split_lens_table(images, captions, "Captions"),
        "prompts": split_lens_table(images, prompts, "Prompts"),
        "funnel": funnel(run, images, captions, prompts, steps),
        "rejections": rejection_table(rejections),
    }


def write_counts(out: Path, tables: dict[str, pd.DataFrame]) -> Path:
    import json

    # to_json: numpy integers become JSON numbers (json.dumps refuses them)
    payload = {name: json.loads(t.to_json(orient="split", index=False)) for name, t in tables.items()}
    io.atomic_write_json(out / COUNTS_FILE, payload)
    return out / COUNTS_FILE


def read_counts(out: Path) -> dict[str, pd.DataFrame] | None:
    """The tables `write_counts` saved, or None for an export written before they were saved."""
    import json

    path = out / COUNTS_FILE
    if not path.exists():
        return None
    payload = json.loads(path.read_text())
    return {name: pd.DataFrame(t["data"], columns=t["columns"]) for name, t in payload.items()}
