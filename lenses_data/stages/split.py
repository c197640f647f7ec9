"""Split stage (global, one shard): train / valid / test by image, groups never straddle splits.

Input (`split.input_stage`): "filter" = dedupe survivors (kept=True) that the VLM filter passed;
"dedupe" = all dedupe survivors; "auto" (default) = "filter" when RUN/filter is complete, else
"dedupe". With the default order (ingest -> dedupe -> filter -> split) that is the filter-passed
survivors.

Assignment unit: the dedupe split group (`split_group_id`: duplicates plus near neighbours above
the leakage thresholds). Units are ordered by sha256(seed | unit id), a deterministic shuffle that
depends only on the ids and the seed; test is filled first, then valid, each up to its target
count (a unit that would overflow a split goes on to the next split), the rest is train. Targets
are counts, or fractions of the input rounded to the nearest image (`SplitConfig.sizes`).

Sources appended to a built run: every earlier assignment is kept (`extend_splits`).

Outputs: RUN/split/part-00000.parquet (SplitAssignment; group_id is the split group),
RUN/split/leakage.json (cross-split pairs by signal and tier: zero by construction, checked).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pandas as pd

from lenses_data import io
from lenses_data.config.dedupe import SplitConfig
from lenses_data.config.pipeline import DEDUPE, FILTER, SPLIT, spec_of
from lenses_data.schemas import SPLIT_NAMES, DedupeRecord, FilterDecision, SplitAssignment
from lenses_data.stages.base import ShardStats, check_columns, summarize
from lenses_data.stages.global_base import GlobalStage
from lenses_data.stages.rebuild import EARLIER_OUTPUT, drop_earlier, earlier_file

STAGE = SPLIT
LEAKAGE = "leakage.json"


class LeakageError(RuntimeError):
    """A linked pair ended up in two splits: a bug, never an acceptable outcome."""


def resolve_input(run: Path, config: SplitConfig) -> str:
    if config.input_stage != "auto":
        return config.input_stage
    return "filter" if io.stage_is_complete(run, FILTER) else "dedupe"


def load_survivors(run: Path, config: SplitConfig) -> tuple[pd.DataFrame, str]:
    source = resolve_input(run, config)
    records = io.read_stage(run, DEDUPE, DedupeRecord)
    check_columns(STAGE, records, SplitStage.reads, "input (dedupe)", exact=False)
    kept = records[records["kept"]].copy()
    if source == "filter":
        decisions = io.read_stage(run, FILTER, FilterDecision)
        kept = kept[kept["image_id"].isin(set(decisions.loc[decisions["passed"], "image_id"]))]
    kept["unit"] = kept["split_group_id"].fillna(kept["group_id"])
    return kept[["image_id", "unit"]].reset_index(drop=True), source


def assign_splits(frame: pd.DataFrame, config: SplitConfig) -> pd.DataFrame:
    """frame: image_id, unit -> image_id, group_id, split (whole units per split)."""
    n_valid, n_test = config.sizes(len(frame))
    chosen = _deal(frame, config.seed, {"test": n_test, "valid": n_valid}, {"test": 0, "valid": 0})
    out = pd.DataFrame({"image_id": frame["image_id"], "group_id": frame["unit"]})
    out["split"] = frame["unit"].map(chosen)
    return out.sort_values("image_id", ignore_index=True)


def _deal(frame: pd.DataFrame, seed: str, targets: dict[str, int], filled: dict[str, int]) -> dict[str, str]:
    """Units in hash order: test first, then valid, each up to its target; the rest is train."""
    sizes = frame.groupby("unit").size()
    keys = {u: hashlib.sha256(f"{seed}|{u}".encode()).hexdigest() for u in sizes.index}
    order = sorted(sizes.index, key=lambda u: (keys[u], u))
    chosen: dict[str, str] = {}
    for unit in order:
        size = int(sizes[unit])
        split = next((s for s in ("test", "valid") if filled[s] + size <= targets[s]), "train")
        if split != "train":
            filled[split] += size
        chosen[unit] = split
    return chosen


def extend_splits(frame: pd.DataFrame, earlier: pd.DataFrame, config: SplitConfig) -> pd.DataFrame:
    """`assign_splits` over a grown pool that keeps every earlier assignment (sources appended).

    An image assigned before keeps its split and group. A new image whose unit (split group) holds
    an earlier image joins that unit's split: a new near neighbour of a test image is a test image.
    Units with no earlier image are dealt as `assign_splits` deals, toward the targets of the grown
    pool, counting what is already in each split."""
    split_of = dict(zip(earlier["image_id"], earlier["split"].astype(str), strict=True))
    unit_split = dict(zip(earlier["group_id"], earlier["split"].astype(str), strict=True))
    group_of = dict(zip(earlier["image_id"], earlier["group_id"], strict=True))
    known = frame["image_id"].isin(split_of)
    joins = ~known & frame["unit"].isin(unit_split)
    split = frame["image_id"].map(split_of).where(known, frame["unit"].map(unit_split))
    n_valid, n_test = config.sizes(len(frame))
    filled = {name: int((split == name).sum()) for name in ("test", "valid")}
    fresh = frame[~known & ~joins]
    chosen = _deal(fresh, config.seed, {"test": n_test, "valid": n_valid}, filled)
    split = split.where(known | joins, frame["unit"].map(chosen))
    group = frame["image_id"].map(group_of).where(known, frame["unit"])
    out = pd.DataFrame({"image_id": frame["image_id"], "group_id": group, "split": split})
    return out.sort_values("image_id", ignore_index=True)


def leakage_report(assignment: pd.DataFrame, pairs: pd.DataFrame) -> dict[str, Any]:
    """Cross-split pairs among assigned images, by tier and signal (must all be zero)."""
    split_of = dict(zip(assignment["image_id"], assignment["split"].astype(str), strict=True))
    a, b = pairs["image_a"].map(split_of), pairs["image_b"].map(split_of)
    both = a.notna() & b.notna()
    cross = both & (a != b)
    report: dict[str, Any] = {"pairs_checked": int(both.sum()), "cross_split": {}}
    for tier in ("duplicate", "leakage"):
        for signal in ("phash", "clip", "both"):
            mask = cross & (pairs["tier"] == tier) & (pairs["signal"] == signal)
            report["cross_split"][f"{tier}/{signal}"] = int(mask.sum())
    report["total_cross_split"] = int(cross.sum())
    return report


class SplitStage(GlobalStage):
    name = STAGE
    # Config paths (and prompt:<template>) that decide this stage's output (lenses_data.stages.settings_guard).
    output_settings = ("dedupe_before_filter", "split")
    input_stage = spec_of(STAGE).input  # as declared; the registry sets the run's
    reads = ("image_id", "group_id", "split_group_id", "kept")
    writes = tuple(SplitAssignment.model_fields)
    needs_finished_input = True

    def run_shard(self, run: Path, shard: int) -> ShardStats:
        from lenses_data.dedupe.pairs import read_pairs

        survivors, source = load_survivors(run, self.config.split)
        earlier = earlier_file(run, STAGE, EARLIER_OUTPUT)  # sources appended: keep what was assigned
        if earlier is None:
            assignment = assign_splits(survivors, self.config.split)
        else:
            assignment = extend_splits(survivors, io.read_shard(earlier, SplitAssignment), self.config.split)
        report = leakage_report(assignment, read_pairs(run))
        if report["total_cross_split"]:
            raise LeakageError(f"split would leak linked pairs across splits: {report['cross_split']}")
        counts = assignment["split"].value_counts()
        stats = {
            "input_stage": source,
            "images": len(assignment),
            "counts": {s: int(counts.get(s, 0)) for s in SPLIT_NAMES},
            "targets": dict(zip(("valid", "test"), self.config.split.sizes(len(assignment)), strict=True)),
            "seed": self.config.split.seed,
            "leakage": report,
        }
        io.atomic_write_json(io.stage_dir(run, STAGE) / LEAKAGE, stats)
        io.write_rejections(run, STAGE, shard, [])
        check_columns(STAGE, assignment, self.writes, f"output shard {shard}", exact=True)
        io.write_shard(run, STAGE, shard, assignment, SplitAssignment)
        drop_earlier(run, STAGE)
        return ShardStats(STAGE, shard, len(assignment), len(assignment), 0, extra=stats)

    def finish(self, run: Path, shards: list[int], stats: list[ShardStats]) -> dict[str, Any]:
        import json

        summary = json.loads((io.stage_dir(run, STAGE) / LEAKAGE).read_text())
        io.mark_stage_complete(run, STAGE, shards, summary)
        n = summary["images"]
        return {**summary, **summarize(STAGE, stats), "records_in": n, "records_out": n, "rejected": 0}


def format_summary(summary: dict[str, Any]) -> str:
    c, t = summary["counts"], summary["targets"]
    leak = summary["leakage"]
    return "\n".join(
        [
            f"split: {summary['images']} images from {summary['input_stage']} survivors (seed {summary['seed']})",
            f"  train {c['train']}, valid {c['valid']} (target {t['valid']}), test {c['test']} (target {t['test']})",
            f"  leakage: {leak['total_cross_split']} cross-split pairs of {leak['pairs_checked']} linked pairs",
        ]
    )
