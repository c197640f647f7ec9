"""Dedupe stage (global, one shard): near-duplicate groups and one survivor per group.

Reads RUN/ingest (or, when `dedupe_before_filter` is False and RUN/filter is complete, only the
filter-passed images) and writes:
- RUN/dedupe/part-00000.parquet: one DedupeRecord per image (kept or removed, group, signal, ...)
- RUN/dedupe/pairs.parquet: every linked pair (DedupePair: duplicate or leakage tier)
- RUN/dedupe/embeddings.npy + embedding_ids.npy: float16 L2-normalised CLIP embeddings, when on
- RUN/dedupe/summary.json: counts, thresholds, index plans, CLIP signal on/off
- RUN/rejections/dedupe-part-00000.parquet: removed duplicates and per-image hash/embedding failures
"""

from __future__ import annotations

import io as pyio
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from lenses_data import io
from lenses_data.config import PipelineConfig
from lenses_data.config.pipeline import DEDUPE, FILTER, INGEST, spec_of
from lenses_data.dedupe.pairs import PAIRS
from lenses_data.schemas import (
    CandidateImage,
    DedupePair,
    DedupeRecord,
    FilterDecision,
    Rejection,
    arrow_schema,
)
from lenses_data.stages.base import ShardStats, check_columns, summarize
from lenses_data.stages.global_base import GlobalStage
from lenses_data.stages.rebuild import EARLIER_OUTPUT, EARLIER_REJECTIONS, drop_earlier, earlier_file

log = logging.getLogger(__name__)

STAGE = DEDUPE
SUMMARY = "summary.json"
EMBEDDINGS = "embeddings.npy"
EMBEDDING_IDS = "embedding_ids.npy"


COLUMNS = ["image_id", "path", "width", "height", "source", "phash", "phash_crops", "dhashes", "hash_version"]


def load_candidates(run: Path, config: PipelineConfig) -> pd.DataFrame:
    """Ingested images; only filter-passed ones when the paper's filter-then-dedupe order is on.

    Read through Arrow, only the columns dedupe uses: pandas would turn an int64 column with a
    null (an image whose hashing failed at ingest) into float64 and lose the low bits of every
    hash. A null hash is 0 here; its row has no `hash_version`, so it is hashed on demand.
    """
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    schema = arrow_schema(CandidateImage)
    tables = [pq.read_table(p, schema=schema, columns=COLUMNS) for p in io.stage_shards(run, INGEST)]
    table = pa.concat_tables(tables) if tables else schema.empty_table().select(COLUMNS)
    if not config.dedupe_before_filter and io.stage_is_complete(run, FILTER):
        decisions = io.read_stage(run, FILTER, FilterDecision)
        passed = pa.array(decisions.loc[decisions["passed"], "image_id"].tolist(), pa.string())
        table = table.filter(pc.is_in(table.column("image_id"), value_set=passed))
    phash = table.column("phash").fill_null(0).to_numpy()
    frame = table.drop_columns(["phash"]).to_pandas()
    frame.insert(5, "phash", phash)
    return frame


def _save_npy(path: Path, array: np.ndarray) -> None:
    buffer = pyio.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    io.atomic_write_bytes(path, buffer.getvalue())


def _table(frame: pd.DataFrame, model: type) -> pa.Table:
    return io.columns_to_table({name: frame[name] for name in model.model_fields}, model)


def read_summary(run: str | Path) -> dict[str, Any]:
    import json

    path = io.stage_dir(run, STAGE) / SUMMARY
    return json.loads(path.read_text()) if path.exists() else {}


def _with_earlier_decisions(run: Path, result: Any) -> Any:
    """Sources appended to a built run: every earlier image keeps its decision (dedupe/earlier.py)."""
    earlier = earlier_file(run, STAGE, EARLIER_OUTPUT)
    if earlier is None:
        return result
    from lenses_data.dedupe.earlier import keep_earlier

    rejected = earlier_file(run, STAGE, EARLIER_REJECTIONS)
    old_rejections = io.read_shard(rejected, Rejection) if rejected else pd.DataFrame(columns=["image_id"])
    return keep_earlier(result, io.read_shard(earlier, DedupeRecord), old_rejections)


class DedupeStage(GlobalStage):
    """Global stage: all images are compared with each other, so there is one shard (0)."""

    name = STAGE
    # Config paths (and prompt:<template>) that decide this stage's output (lenses_data.stages.settings_guard).
    output_settings = ("dedupe_before_filter", "dedupe")
    input_stage = spec_of(STAGE).input  # as declared; the registry sets the run's
    reads = tuple(COLUMNS)
    writes = tuple(DedupeRecord.model_fields)
    needs_finished_input = True

    def run_shard(self, run: Path, shard: int) -> ShardStats:
        from lenses_data.dedupe.pipeline import find_duplicates

        frame = load_candidates(run, self.config)
        check_columns(STAGE, frame, self.reads, "input (ingest)", exact=False)
        result = _with_earlier_decisions(run, find_duplicates(frame, self.config.dedupe))
        check_columns(STAGE, result.records, self.writes, f"output shard {shard}", exact=True)
        folder = io.stage_dir(run, STAGE)
        if result.embeddings is not None:
            _save_npy(folder / EMBEDDINGS, result.embeddings)
            _save_npy(folder / EMBEDDING_IDS, result.records["image_id"].to_numpy().astype("U16"))
        # Built column by column (io.columns_to_table): at 20k images the pairs alone are ~200k rows.
        io.write_table(folder / PAIRS, _table(result.pairs, DedupePair))
        io.atomic_write_json(folder / SUMMARY, result.summary)
        rejections = pd.DataFrame(result.rejections, columns=list(Rejection.model_fields))
        io.write_table(io.rejection_path(run, STAGE, shard), _table(rejections, Rejection))
        io.write_table(io.shard_path(run, STAGE, shard), _table(result.records, DedupeRecord))
        drop_earlier(run, STAGE)  # kept in the shard just written
        reasons = rejections["reason"].value_counts().to_dict()
        return ShardStats(
            stage=STAGE,
            shard=shard,
            records_in=result.summary["images_in"],
            records_out=result.summary["images_out"],
            rejected=len(rejections),
            reasons={str(k): int(v) for k, v in reasons.items()},
            extra=result.summary,
        )

    def finish(self, run: Path, shards: list[int], stats: list[ShardStats]) -> dict[str, Any]:
        summary = read_summary(run)
        io.mark_stage_complete(run, STAGE, shards, summary)
        # counts come from the files, so a resumed (skipped) shard reports the same numbers
        reasons = io.read_rejections(run, STAGE)["reason"].value_counts()
        counts = {
            "records_in": summary.get("images_in", 0),
            "records_out": summary.get("images_out", 0),
            "rejected": int(reasons.sum()),
            "reasons": {str(k): int(v) for k, v in sorted(reasons.items())},
        }
        return {**summary, **summarize(STAGE, stats), **counts}


def format_summary(summary: dict[str, Any]) -> str:
    """Human-readable summary for the CLI."""
    t = summary["thresholds"]
    clip = summary["clip_signal"]
    clip_line = {
        "off": "OFF (no dedupe.clip_checkpoint configured: only perceptual hashes decided)",
        "on": f"ON ({summary['clip_model']} from {summary['clip_checkpoint']}, device {summary['clip_device']})",
        "random-weights": "ON WITH RANDOM WEIGHTS - mechanics test only, results are meaningless",
    }[clip]
    lines = [
        f"dedupe: {summary['images_in']} images in, {summary['images_out']} kept, {summary['removed']} removed",
        f"  groups with duplicates: {summary['groups']} (largest {summary['largest_group']}); "
        f"split groups: {summary['split_groups']}",
        "  removed by signal: " + ", ".join(f"{k}={v}" for k, v in summary["removed_by_signal"].items()),
        f"  failed: {summary['failed']}",
        f"  thresholds: {t['hash_kind']} radius {t['hamming_radius']} (leakage {t['leakage_hamming_radius']}), "
        f"cosine {t['clip_threshold']} (leakage {t['leakage_threshold']}); calibrated default radius "
        f"{t['calibrated_default_radius']}",
        f"  hash index: {summary['hash_index']['method']}",
        f"  CLIP signal: {clip_line}",
    ]
    crop = summary.get("crop_signal")
    lines.append(
        f"  crop signal: {crop['candidates']} candidate pairs ({crop['candidates_per_image']}/image, aligned "
        f"radius {t.get('crop_radius')}), {crop['confirmed']} confirmed by dHash (radius "
        f"{t.get('crop_confirm_radius')}), {crop['seconds']} s"
        if crop
        else "  crop signal: off"
    )
    embed = summary.get("clip_embed")
    if embed:
        lines.append(
            f"  CLIP network: {embed['activation']} ({embed['activation_reason']}); {embed['precision']}, "
            f"batch {embed['batch_size']}, {embed['decode_workers']} decode threads"
        )
    if summary.get("clip_index"):
        ci = summary["clip_index"]
        lines.append(f"  CLIP index: {ci['method']} (recall on sample: {ci['recall']})")
    return "\n".join(lines)
