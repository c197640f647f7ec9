"""The report's near-duplicate groups: a bounded, deterministic choice, most informative first, and
for each removed image the signal that merged it, at what distance, against which threshold.

Only the removed rows of the dedupe shards are kept (each shard is filtered as it is read): a group
is its survivor, whose image id is the `group_id` (`dedupe/groups.py`), plus its removed members.
Groups are taken in turn from rankings, so every signal gets its borderline cases on the page:
the largest groups (more than two images), then, for pHash, crop and CLIP each, the groups holding
the removal nearest that signal's threshold (its distance over the threshold's: 1 is at the
threshold). Ties go to the lower group id. A run without a signal simply has no such ranking.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lenses_data import io
from lenses_data.config.pipeline import DEDUPE

RECORD_COLUMNS = ("image_id", "group_id", "signal", "distance", "linked_via")
PAIR_COLUMNS = ("image_a", "image_b", "signal", "hamming", "cosine", "aligned", "tier")
LABEL = {"phash": "pHash", "both": "pHash + CLIP", "phash_crop": "crop", "clip": "CLIP"}
# ranking name -> the signals judged against that threshold ("both": its distance is the pHash's)
FAMILIES = {"pHash": ("phash", "both"), "crop": ("phash_crop",), "CLIP": ("clip",)}
THRESHOLD_KEYS = ("hamming_radius", "crop_radius", "crop_confirm_radius", "clip_threshold")
NEAR = 0.75  # a removal at >= 3/4 of its threshold is marked as near it


@dataclass
class DupeView:
    """What the report's near-duplicate section shows."""

    groups: list[dict[str, Any]]  # group_id, size, why, members (survivor first), pairs
    total: int  # groups of two or more images in the run
    removed_by_signal: dict[str, int]
    thresholds: dict[str, Any] = field(default_factory=dict)


def read_thresholds(run: Path) -> dict[str, Any]:
    """The thresholds the dedupe stage ran with: its summary, completed from the settings it recorded
    (`_SETTINGS.json`) for keys an older summary lacks (the crop radii)."""
    folder = io.stage_dir(run, DEDUPE)
    summary = json.loads((folder / "summary.json").read_text()) if (folder / "summary.json").exists() else {}
    found = dict(summary.get("thresholds", {}))
    settings_file = folder / "_SETTINGS.json"
    settings = json.loads(settings_file.read_text()).get("inputs", {}) if settings_file.exists() else {}
    for key in THRESHOLD_KEYS:
        if key not in found:  # a summary written before the key existed (null: the signal was off)
            found[key] = settings.get(f"dedupe.{key}")
    found["clip_signal"] = summary.get("clip_signal")
    return found


def closeness(signal: Any, distance: Any, t: dict[str, Any]) -> float:
    """Distance over its threshold's (0: identical, 1: at the threshold); NaN when unknown."""
    if distance is None or distance != distance:
        return float("nan")
    if signal == "clip":
        cosine = t.get("clip_threshold")
        limit = None if cosine is None else 1.0 - float(cosine)
    else:
        key = {"phash": "hamming_radius", "both": "hamming_radius", "phash_crop": "crop_radius"}.get(signal)
        limit = t.get(key) if key else None
    if limit is None:
        return float("nan")
    return float(distance) / float(limit) if limit else 1.0


def _removed(run: Path) -> pd.DataFrame:
    """Removed rows of every dedupe shard (columns an older run lacks are null)."""
    parts = []
    folder = io.stage_dir(run, DEDUPE)
    for path in sorted(folder.glob("part-*.parquet")) if folder.exists() else []:
        pf = pq.ParquetFile(path)
        names = pf.schema_arrow.names
        table = pf.read(columns=[c for c in (*RECORD_COLUMNS, "kept") if c in names])
        parts.append(table.filter(pc.invert(table["kept"])).drop_columns(["kept"]).to_pandas())
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    return frame.reindex(columns=list(RECORD_COLUMNS))


def _rankings(removed: pd.DataFrame, sizes: pd.Series) -> list[list[tuple[str, str]]]:
    """(group id, why it is shown) lists, best first: the largest groups, then per signal."""
    big = sizes[sizes > 2].reset_index(name="size").sort_values(["size", "group_id"], ascending=[False, True])
    rankings = [[(g, "largest groups first") for g in big["group_id"]]]
    for name, signals in FAMILIES.items():
        rows = removed[removed["signal"].isin(signals)].sort_values(
            ["closeness", "group_id"], ascending=[False, True], na_position="last"
        )
        rankings.append([(g, f"{name} removals, nearest its threshold first") for g in rows["group_id"]])
    return rankings


def choose_groups(removed: pd.DataFrame, t: dict[str, Any], limit: int) -> dict[str, str]:
    """Up to `limit` group ids (in the order shown) -> why each is shown: the next group of each
    ranking in turn; then, should the rankings run out first, the other groups by id."""
    removed = removed.assign(
        closeness=[closeness(s, d, t) for s, d in zip(removed["signal"], removed["distance"], strict=True)]
    )
    sizes = removed.groupby("group_id").size() + 1
    limit = min(limit, len(sizes))
    queues = [iter(r) for r in _rankings(removed, sizes)]
    chosen: dict[str, str] = {}
    while queues and len(chosen) < limit:
        for queue in list(queues):
            pick = next(((g, why) for g, why in queue if g not in chosen), None)
            if pick is None:
                queues.remove(queue)
            elif len(chosen) < limit:
                chosen[pick[0]] = pick[1]
    for group_id in sorted(sizes.index):  # groups with no recorded signal (not written by today's dedupe)
        if len(chosen) >= limit:
            break
        chosen.setdefault(group_id, "other groups")
    return chosen


def _pairs(run: Path, ids: list[str]) -> pd.DataFrame:
    """Pairs among the shown images (an older run's file has no `aligned` column: null)."""
    path = io.stage_dir(run, DEDUPE) / "pairs.parquet"
    if not ids or not path.exists():
        return pd.DataFrame(columns=list(PAIR_COLUMNS))
    names = pq.ParquetFile(path).schema_arrow.names
    wanted = pa.array(sorted(ids), pa.string())
    table = pq.read_table(path, columns=[c for c in PAIR_COLUMNS if c in names])
    table = table.filter(pc.and_(pc.is_in(table["image_a"], wanted), pc.is_in(table["image_b"], wanted)))
    return table.to_pandas().reindex(columns=list(PAIR_COLUMNS))


def _member(row: dict[str, Any], pairs: dict[tuple[str, str], dict], t: dict[str, Any]) -> dict[str, Any]:
    """A removed member with the pair that merged it (hamming, cosine, aligned) and its closeness."""
    via = row["linked_via"] if isinstance(row["linked_via"], str) else row["group_id"]
    pair = pairs.get(tuple(sorted((row["image_id"], via))), {})
    near = closeness(row["signal"], row["distance"], t)
    return {**row, "kept": False, "linked_via": via, "pair": pair, "closeness": near}


def dedupe_view(run: Path, limit: int) -> DupeView:
    """The groups the report shows (at most `limit`) and the run's totals."""
    removed = _removed(run)
    t = read_thresholds(run)
    counts = removed["signal"].value_counts().to_dict()
    by_signal = {s: int(counts.get(s, 0)) for s in LABEL}
    total = int(removed["group_id"].nunique())
    if limit <= 0 or removed.empty:
        return DupeView([], total, by_signal, t)
    chosen = choose_groups(removed, t, limit)
    shown = removed[removed["group_id"].isin(list(chosen))]
    pairs = _pairs(run, sorted(set(shown["image_id"]) | set(chosen)))
    by_pair = {(p["image_a"], p["image_b"]): p for p in pairs.to_dict("records")}
    groups = []
    for group_id, why in chosen.items():
        rows = shown[shown["group_id"] == group_id].sort_values("image_id").to_dict("records")
        inside = {group_id, *(r["image_id"] for r in rows)}
        members = [{"image_id": group_id, "kept": True}] + [_member(r, by_pair, t) for r in rows]
        linked = [p for k, p in by_pair.items() if k[0] in inside and k[1] in inside]
        groups.append(
            {"group_id": group_id, "size": len(inside), "why": why, "members": members, "pairs": linked}
        )
    return DupeView(groups, total, by_signal, t)


def is_near(member: dict[str, Any]) -> bool:
    value = member.get("closeness")
    return value is not None and not np.isnan(value) and value >= NEAR
