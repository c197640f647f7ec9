"""Regenerate after a change, paying only for what changed (`lenses run --rebuild-changed`).

Two ways a run directory meets a changed config (judged by `settings_guard.assess_run`):

- Other settings from stage S on: with `--rebuild-changed`, S and every stage after it are moved
  aside, whole, into `RUN/_replaced/<S's old settings digest>/`: the stage folders, their
  rejections (`rejections/<stage>-part-*.parquet`) and their journals (`journal/<stage>/`); the
  stages before S are kept as they are. The rebuilt stages' model requests are first looked up in
  those moved journals by request (lenses_data.models.reuse.replaced_runs, the key of cross-run
  reuse): an answer already paid for is copied into the new journal instead of being asked again.
- Sources appended to `ingest.sources`: the stages made from the smaller pool are extended, not
  redone. Each loses only its commit point before its new settings are recorded (`uncommit`), so
  it runs again over its grown input: ingest appends shards for the new sources, dedupe and split
  keep every earlier decision, and a sharded stage skips its finished shards and does the new ones.

Both are safe to kill. The move is planned first (`_replaced/_PENDING.json`, written atomically)
and each item moves by one rename; a rerun finishes a pending plan before anything else. An
extended stage records its new settings only after losing its commit point, so a kill in between
leaves it judged "extend" again.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from lenses_data import io
from lenses_data.models.journal import JOURNAL_DIR

log = logging.getLogger(__name__)

PENDING = "_PENDING.json"


def _unique(root: Path, name: str) -> str:
    """`name`, or `name-2`, `name-3`...: settings changed back and forth replace the same digest twice."""
    chosen, number = name, 1
    while (root / chosen).exists():
        number += 1
        chosen = f"{name}-{number}"
    return chosen


def _items(run: Path, stage: str) -> list[Path]:
    """What a stage wrote in the run directory, relative to it: its folder, journals and rejections."""
    found = [Path(stage), Path(JOURNAL_DIR) / stage]  # the shard journals: RUN/journal/<stage>/
    rejections = run / io.REJECTIONS_DIR
    if rejections.is_dir():
        found += [p.relative_to(run) for p in sorted(rejections.glob(f"{stage}-part-*.parquet"))]
    return [item for item in found if (run / item).exists()]


def _move_all(run: Path, plan: dict[str, Any]) -> list[str]:
    """Carry out a plan; each item is one rename, and an item already moved is skipped."""
    into = run / io.REPLACED_DIR / plan["into"]
    moved = []
    for stage in plan["stages"]:
        for item in _items(run, stage):
            (into / item).parent.mkdir(parents=True, exist_ok=True)
            os.replace(run / item, into / item)
            moved.append(str(item))
    return moved


def finish_pending(run: str | Path) -> None:
    """Finish a move that a killed `--rebuild-changed` left half done (its plan is on disk)."""
    run = Path(run)
    pending = run / io.REPLACED_DIR / PENDING
    if pending.exists():
        plan = json.loads(pending.read_text())
        log.warning("finishing the move of %s into %s left by a killed rebuild", plan["stages"], plan["into"])
        _move_all(run, plan)
        pending.unlink()


def replace_stages(run: str | Path, stages: list[str], digest: str) -> Path:
    """Move `stages` (the first changed stage and every later one) aside; returns where they went."""
    run = Path(run)
    root = run / io.REPLACED_DIR
    plan = {"into": _unique(root, digest or "unrecorded"), "stages": stages}
    root.mkdir(parents=True, exist_ok=True)
    io.atomic_write_json(root / PENDING, plan)
    moved = _move_all(run, plan)
    (root / PENDING).unlink()
    log.warning(
        "rebuild-changed: stages %s will be redone; their outputs are kept in %s (%d item(s))",
        ", ".join(stages),
        root / plan["into"],
        len(moved),
    )
    return root / plan["into"]


EARLIER_OUTPUT = "_earlier-part-00000.parquet"  # leading underscore: readers of the folder skip it
EARLIER_REJECTIONS = "_earlier-rejections.parquet"


def uncommit(run: str | Path, stage: str) -> None:
    """Make a finished stage run again over its grown input, keeping what it decided.

    A sharded stage loses its success marker only: it skips its finished shards. A global stage's
    one shard counts as done while its output and rejections exist, so both are renamed to
    `EARLIER_REJECTIONS` and `EARLIER_OUTPUT` in its folder (rejections first: from then on the
    shard is not done), where dedupe and split read the decisions they keep (`earlier_file`).
    Ingest keeps its files: it appends the sources its summary does not list yet."""
    from lenses_data.stages.registry import stage_class

    run = Path(run)
    (io.stage_dir(run, stage) / io.SUCCESS_MARKER).unlink(missing_ok=True)
    cls = stage_class(stage)
    if not getattr(cls, "skips_finished_shard", False) or getattr(cls, "appends_sources", False):
        return
    folder = io.stage_dir(run, stage)
    for source, target in ((io.rejection_path(run, stage, 0), EARLIER_REJECTIONS),
                           (io.shard_path(run, stage, 0), EARLIER_OUTPUT)):  # fmt: skip
        if source.exists():
            os.replace(source, folder / target)


def earlier_file(run: str | Path, stage: str, name: str) -> Path | None:
    """A global stage's output (`EARLIER_OUTPUT`) or rejections before its input grew, if any."""
    path = io.stage_dir(run, stage) / name
    return path if path.exists() else None


def drop_earlier(run: str | Path, stage: str) -> None:
    """After the grown shard is written: the earlier files are in it."""
    for name in (EARLIER_OUTPUT, EARLIER_REJECTIONS):
        (io.stage_dir(run, stage) / name).unlink(missing_ok=True)
