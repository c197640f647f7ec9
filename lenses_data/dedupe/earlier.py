"""Dedupe over a grown pool keeps every earlier decision: new candidates never displace old ones.

When sources are appended to a built run (lenses_data.stages.ingest_append), dedupe runs again
over the whole pool (old and new images, so a new image is compared with every earlier one), then
this module puts the earlier decisions back:

- An earlier image keeps its record as it was: kept or removed, group, split group.
- A new image in a duplicate group with an earlier image is removed, as a duplicate of that
  group's earlier survivor, even where the survivor rule (largest resolution, then lowest id)
  would prefer the new one. Why: the earlier survivor's texts, split and model answers are already
  made (and may be published); swapping it would redo them and could move a test image's twin
  into another split.
- A new image linked (leakage tier) to exactly one earlier split group joins that group, so the
  split stage puts it in that group's split. One linked to two or more earlier split groups
  (which may sit in different splits) is removed (`bridges_split_groups`): no split can take it
  without a leak.
- New images linked only to each other follow the ordinary rules among themselves.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pandas as pd

from lenses_data.dedupe.pipeline import REASON, STAGE, DedupeResult

BRIDGES = "bridges_split_groups"


def _unit(row: dict[str, Any]) -> str:
    unit = row.get("split_group_id")
    return str(row["group_id"] if unit is None or unit != unit else unit)  # None or NaN: no split group


def _survivor(old: dict[str, dict[str, Any]], members: list[str]) -> str:
    """The earlier survivor of a group holding earlier `members` (lowest id when several)."""
    kept = [m for m in members if old[m]["kept"]]
    return min(kept or [str(old[m]["duplicate_of"]) for m in members if old[m]["duplicate_of"]] or members)


def _pair_of(pairs: pd.DataFrame, image: str, others: list[str]) -> tuple[str | None, float | None]:
    """Signal and distance of a duplicate-tier pair linking `image` to one of `others`."""
    mine = pairs[(pairs["tier"] == "duplicate") & ((pairs["image_a"] == image) | (pairs["image_b"] == image))]
    linked = mine[mine["image_a"].isin(others) | mine["image_b"].isin(others)]
    row = (linked if len(linked) else mine).head(1)
    if not len(row):
        return None, None
    signal, hamming, cosine = str(row["signal"].iloc[0]), row["hamming"].iloc[0], row["cosine"].iloc[0]
    distance = 1 - cosine if signal == "clip" else hamming
    return signal, None if pd.isna(distance) else float(distance)


def _members(rows: list[dict[str, Any]], key: Any) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for row in rows:
        found.setdefault(key(row), []).append(row["image_id"])
    return found


def _new_duplicate(row: dict, old: dict, members: list[str], pairs: pd.DataFrame) -> dict[str, Any]:
    """A new image in a duplicate group with earlier images: removed, the earlier survivor kept."""
    survivor = _survivor(old, [m for m in members if m in old])
    signal, distance = _pair_of(pairs, row["image_id"], members)
    row.update(kept=False, duplicate_of=survivor, group_id=old[survivor]["group_id"], signal=signal,
               distance=distance, split_group_id=_unit(old[survivor]), linked_via=row["linked_via"] or survivor)  # fmt: skip
    message = (f"near-duplicate of {survivor}, ingested before (an earlier image is kept: its texts, split "
               f"and answers are already made); signal {signal}, distance {distance}")  # fmt: skip
    return _rejection(row["image_id"], REASON.get(str(signal), REASON["phash"]), message)


def _new_neighbour(row: dict, old: dict, linked: list[str]) -> dict[str, Any] | None:
    """A new image whose split group (leakage tier) holds earlier images: it joins their split
    group, or, linked to several, is removed."""
    units = sorted({_unit(old[m]) for m in linked})
    if len(units) == 1:
        row["split_group_id"] = units[0]
        return None
    if not row["kept"]:
        return None
    row["kept"] = False
    message = f"linked to earlier split groups {units}, which may be in different splits: no split takes it"
    return _rejection(row["image_id"], BRIDGES, message)


def keep_earlier(
    result: DedupeResult, earlier: pd.DataFrame, earlier_rejections: pd.DataFrame
) -> DedupeResult:
    """`result` (dedupe over the whole grown pool) with every earlier decision put back."""
    columns = list(result.records.columns)
    rows = result.records.to_dict(orient="records")
    old = {r["image_id"]: r for r in earlier.to_dict(orient="records")}
    groups, units = _members(rows, lambda r: r["group_id"]), _members(rows, _unit)
    full_unit = {r["image_id"]: _unit(r) for r in rows}
    new_rejections = []
    for row in rows:
        if row["image_id"] in old:
            row.update(old[row["image_id"]])
            continue
        members = groups[row["group_id"]]
        linked = [m for m in units[full_unit[row["image_id"]]] if m in old]
        if any(m in old for m in members):
            new_rejections.append(_new_duplicate(row, old, members, result.pairs))
        elif linked:
            new_rejections.append(_new_neighbour(row, old, linked))
    decided = set(old) | set(earlier_rejections["image_id"].dropna())
    rejections = [
        *earlier_rejections.to_dict(orient="records"),
        *(r for r in result.rejections if r.get("image_id") not in decided),
        *(r for r in new_rejections if r is not None),
    ]
    records = pd.DataFrame(rows, columns=columns)
    summary = {
        **result.summary,
        "images_out": int(records["kept"].sum()),
        "removed": int((~records["kept"].astype(bool)).sum()),
        "earlier_decisions": {"kept_as_they_were": len(old), "new_images": len(rows) - len(old)},
    }
    return replace(result, records=records, rejections=rejections, summary=summary)


def _rejection(image: str, reason: str, message: str) -> dict[str, Any]:
    return {"stage": STAGE, "record_id": image, "reason": reason, "message": message, "source": None,
            "image_id": image, "raw": None}  # fmt: skip
