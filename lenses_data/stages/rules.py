"""Rules stage: the deterministic checks of lenses_data.annotation.rules over generated texts.

Per text, every violated rule that rejects (`rules.rejects`: damage; the word limits only with
`annotate.word_limits: reject`; the phrase-bank rules only with `annotate.idiom_rules: strict`) is
one rejection row with its reason code (a text can violate several); the others are recorded in
the text's `flags`. Then, per image and kind,
near-duplicate paraphrases are rejected by content n-gram overlap (and optionally by
sentence-embedding similarity), keeping the first text of every lens so a lens the model covered
keeps a text where possible. The idiomatic share per image (target 40%, rounded up), the flags and
lens coverage are reported in the stage stats, not enforced.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from lenses_data import io
from lenses_data.annotation import rules
from lenses_data.annotation.phrase_bank import default_phrase_bank
from lenses_data.annotation.prompts import TEMPLATE_OF_KIND
from lenses_data.annotation.rejection_rows import rejection
from lenses_data.annotation.text_checks import duplicate_rejections, per_text_violations
from lenses_data.config.pipeline import RULES, spec_of
from lenses_data.schemas import LENS_NAMES, LensText
from lenses_data.stages._annotate import lens_text_rows, records_frame, rejections_frame
from lenses_data.stages.base import ShardedStage

STAGE = RULES


def image_report(given: pd.DataFrame, kept: pd.DataFrame, share: float) -> pd.DataFrame:
    """Per image and kind: lenses given/kept/lost, idiomatic texts against the rounded-up target."""
    rows = []
    kept_groups = dict(list(kept.groupby(["image_id", "kind"], observed=True))) if len(kept) else {}
    for (image_id, kind), group in given.groupby(["image_id", "kind"], observed=True):
        mine = kept_groups.get((image_id, kind), kept.iloc[0:0])
        given_lenses = set(group["lens"].astype(str))
        kept_lenses = set(mine["lens"].astype(str))
        idiomatic = int(sum(len(i) > 0 for i in mine["idioms"])) if len(mine) else 0
        target = rules.idiom_target(len(mine), share)
        rows.append(
            {
                "image_id": image_id,
                "kind": kind,
                "kept": len(mine),
                "idiomatic": idiomatic,
                "idiom_target": target,
                "meets_idiom_target": idiomatic >= target,
                "lenses_lost": sorted(given_lenses - kept_lenses),
                "lenses_missing": [n for n in LENS_NAMES if n not in kept_lenses],
            }
        )
    return pd.DataFrame(rows)


def summarize_report(report: pd.DataFrame) -> dict[str, Any]:
    if report.empty:
        return {}
    out: dict[str, Any] = {}
    for kind, group in report.groupby("kind"):
        kept = group["kept"].sum()
        out[kind] = {
            "images": len(group),
            "idiomatic_share": round(float(group["idiomatic"].sum() / kept), 4) if kept else None,
            "images_meeting_idiom_target": int(group["meets_idiom_target"].sum()),
            "images_with_lens_lost_to_rules": int((group["lenses_lost"].str.len() > 0).sum()),
            "images_with_all_five_lenses": int((group["lenses_missing"].str.len() == 0).sum()),
        }
    return out


class RulesStage(ShardedStage):
    name = STAGE
    # Config paths (and prompt:<template>) that decide this stage's output (lenses_data.stages.settings_guard).
    output_settings = ("annotate",)
    input_stage = spec_of(STAGE).input  # as declared; the registry sets the run's
    reads = ("text_id", "image_id", "kind", "lens", "text", "focus")
    writes = tuple(LensText.model_fields)

    def transform(self, run: Path, shard: int, frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        return self.annotate_frame(frame)

    def annotate_frame(self, df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Generated LensText rows -> (rows passing every rule, one rejection per violation)."""
        settings, bank = self.config.annotate, default_phrase_bank()
        rejected: list[dict[str, Any]] = []
        survivors = []
        for row in lens_text_rows(df):
            violations = per_text_violations(row, settings, bank)
            rejecting, flags = rules.split_violations(
                violations, row["kind"], settings.idiom_rules, word_limits=settings.word_limits
            )
            for v in rejecting:
                rejected.append(
                    rejection(STAGE, row["text_id"], v.reason, v.message, image_id=row["image_id"])
                )
            if not rejecting:
                survivors.append({**row, "flags": [v.reason for v in flags]})
        duplicates = duplicate_rejections(survivors, settings)
        rejected.extend(duplicates)
        dropped = {r["record_id"] for r in duplicates}
        kept = [r for r in survivors if r["text_id"] not in dropped]
        for row in kept:
            row["idioms"] = [m.idiom for m in bank.find(row["text"], TEMPLATE_OF_KIND[row["kind"]])]
        return records_frame(kept, LensText), rejections_frame(rejected)

    def extra_stats(self, run: Path) -> dict[str, Any]:
        """Per-kind coverage and flag counts, one shard at a time: a rules shard holds the texts of
        the same images as the generate shard of its name, and every statistic is a sum."""
        settings = self.config.annotate
        totals: dict[str, dict[str, int]] = {}
        flags: dict[str, dict[str, int]] = {}
        for given_path in io.stage_shards(run, self.input_stage):
            kept_path = io.stage_dir(run, STAGE) / given_path.name
            given = _read_columns(given_path, ("image_id", "kind", "lens"))
            kept = _read_columns(kept_path, ("image_id", "kind", "lens", "idioms", "flags"))
            _add_report(totals, image_report(given, kept, settings.idiom_target_share))
            for kind, counts in flag_counts(kept).items():
                mine = flags.setdefault(kind, {})
                for code, count in counts.items():
                    mine[code] = mine.get(code, 0) + count
        modes = {"idiom_rules": settings.idiom_rules, "word_limits": settings.word_limits}
        return {**modes, "per_kind": _summary(totals), "flags": flags}


def _read_columns(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    """Only the named columns of one shard, typed as `read_stage` types them; empty if it is absent."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lenses_data.schemas import arrow_schema

    full = arrow_schema(LensText)
    schema = pa.schema([full.field(name) for name in columns])
    if not path.exists():
        return io.typed_frame(schema.empty_table())
    return io.typed_frame(pq.read_table(path, columns=list(columns), schema=schema))


_SUMS = ("images", "idiomatic", "kept", "meeting", "lost", "all_five")


def _add_report(totals: dict[str, dict[str, int]], report: pd.DataFrame) -> None:
    """Add one shard's per-image report to the running per-kind sums."""
    if report.empty:
        return
    for kind, group in report.groupby("kind"):
        row = totals.setdefault(kind, dict.fromkeys(_SUMS, 0))
        row["images"] += len(group)
        row["idiomatic"] += int(group["idiomatic"].sum())
        row["kept"] += int(group["kept"].sum())
        row["meeting"] += int(group["meets_idiom_target"].sum())
        row["lost"] += int((group["lenses_lost"].str.len() > 0).sum())
        row["all_five"] += int((group["lenses_missing"].str.len() == 0).sum())


def _summary(totals: dict[str, dict[str, int]]) -> dict[str, Any]:
    """The sums as `summarize_report` words them, kinds in sorted order."""
    return {
        kind: {
            "images": row["images"],
            "idiomatic_share": round(float(row["idiomatic"] / row["kept"]), 4) if row["kept"] else None,
            "images_meeting_idiom_target": row["meeting"],
            "images_with_lens_lost_to_rules": row["lost"],
            "images_with_all_five_lenses": row["all_five"],
        }
        for kind, row in sorted(totals.items())
    }


def flag_counts(texts: pd.DataFrame) -> dict[str, dict[str, int]]:
    """kind -> flag code -> number of texts carrying it."""
    out: dict[str, dict[str, int]] = {}
    if texts.empty:
        return out
    for kind, flags in zip(texts["kind"], texts["flags"], strict=True):
        counts = out.setdefault(str(kind), {})
        for code in flags if flags is not None else ():
            counts[code] = counts.get(code, 0) + 1
    return out
