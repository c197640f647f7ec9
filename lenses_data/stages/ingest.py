"""Ingest stage: sources -> decoded, hashed candidate images (RUN/ingest) and rejections.

Pipeline: source readers yield items in a deterministic order; URLs are downloaded by a thread
pool (I/O bound); bytes are checked, hashed and materialised by a process pool in batches (CPU
bound); the decode process also computes the perceptual hashes dedupe needs from the image it
decoded (one decode per image). Both pools are fed through a bounded window, so memory stays flat. Results are sorted by input order, exact duplicates
(same image id) collapse onto the first occurrence, and the accepted rows are sharded sorted by
image id, which makes a rerun over the same sources write byte-identical shards.
Row metadata is held in memory until the end (about 1 kB per image); pixels never are.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from lenses_data import io as lio
from lenses_data.candidates.fetch import FetchError, fetch_url
from lenses_data.candidates.imaging import DecodeLimits
from lenses_data.candidates.sources import SourceItem, detect_kind, iter_source
from lenses_data.config import PipelineConfig
from lenses_data.config.pipeline import INGEST, spec_of
from lenses_data.schemas import CandidateImage, Rejection
from lenses_data.stages.base import ShardStats, check_columns
from lenses_data.stages.global_base import GlobalStage
from lenses_data.stages.ingest_append import earlier_pool, write_appended
from lenses_data.stages.ingest_exec import DecodePool, LazyClient, Progress, batched, ordered
from lenses_data.stages.ingest_rows import METADATA_FIELDS, SUMMARY_FILE, KeptImages, remove_stale, shards_of

STAGE = INGEST
EXACT_DUPLICATE = "exact_duplicate"
log = logging.getLogger(__name__)


@dataclass
class IngestSummary:
    run: Path
    sources: list[str]
    accepted: int = 0
    rejected: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)
    shards: int = 0
    rejection_shards: int = 0
    seconds: float = 0.0

    def stats(self) -> dict[str, Any]:
        return {
            "sources": self.sources,
            "accepted": self.accepted,
            "rejected": dict(sorted(self.rejected.items())),
            "skipped": dict(sorted(self.skipped.items())),
            "shards": self.shards,
            "rejection_shards": self.rejection_shards,
        }

    def format(self) -> str:
        total_rejected = sum(self.rejected.values())
        lines = [
            f"ingest finished in {self.seconds:.1f} s -> {self.run / STAGE}",
            f"  sources:  {len(self.sources)}",
            f"  accepted: {self.accepted} (in {self.shards} shard(s))",
            f"  rejected: {total_rejected}",
        ]
        lines += [f"    {reason:<24} {count}" for reason, count in self.rejected.most_common()]
        if self.skipped:
            lines.append(f"  skipped (not candidates): {sum(self.skipped.values())}")
            lines += [f"    {reason:<24} {count}" for reason, count in sorted(self.skipped.items())]
        return "\n".join(lines)


def decode_limits(config: PipelineConfig) -> DecodeLimits:
    ing = config.ingest
    return DecodeLimits(
        min_side=ing.min_side,
        max_aspect_ratio=ing.max_aspect_ratio,
        max_pixels=ing.max_pixels,
        max_file_bytes=ing.max_file_bytes,
        allowed_formats=tuple(ing.allowed_formats),
    )


def run_ingest(sources: Iterable[str], run: str | Path, config: PipelineConfig) -> IngestSummary:
    """Ingest every source into RUN/ingest and mark the stage complete; returns the counts."""
    summary = ingest_sources(sources, run, config)
    lio.mark_stage_complete(summary.run, STAGE, range(summary.shards), summary.stats())
    return summary


def checked_sources(sources: Iterable[str], config: PipelineConfig) -> list[str]:
    """The sources to ingest (given, else the config's); `SourceError` for an unknown or missing one,
    before any work."""
    sources = list(sources) or list(config.ingest.sources)
    if not sources:
        raise ValueError("no sources: pass --source or set ingest.sources in the config")
    for spec in sources:
        detect_kind(spec)
    return sources


def ingest_sources(sources: Iterable[str], run: str | Path, config: PipelineConfig) -> IngestSummary:
    """Write the shards and rejections of RUN/ingest (everything but the success marker)."""
    sources = checked_sources(sources, config)
    run = Path(run).absolute()
    # Until the new commit point (rejection shard 0, written last) exists, the stage is not done.
    (lio.stage_dir(run, STAGE) / lio.SUCCESS_MARKER).unlink(missing_ok=True)
    lio.rejection_path(run, STAGE, 0).unlink(missing_ok=True)
    summary = IngestSummary(run=run, sources=sources)
    started = time.monotonic()
    items: list[SourceItem | None] = []
    outcomes = _process(_numbered(sources, config, items, summary), items, run, config)
    kept, rejections = _collect(outcomes, items, config, started)
    summary.seconds = time.monotonic() - started
    _write(run, config, kept, rejections, summary)
    return summary


def append_sources(run: Path, config: PipelineConfig) -> IngestSummary | None:
    """The sources appended to `ingest.sources` since the finished ingest in `run`, ingested alone
    into new shards after the earlier ones (lenses_data.stages.ingest_append); None when none was."""
    pool = earlier_pool(run, STAGE, checked_sources(config.ingest.sources, config))
    if pool is None:
        return None
    run = run.absolute()
    (lio.stage_dir(run, STAGE) / lio.SUCCESS_MARKER).unlink(missing_ok=True)
    summary = IngestSummary(run=run, sources=pool.added)
    started = time.monotonic()
    items: list[SourceItem | None] = []
    outcomes = _process(_numbered(pool.added, config, items, summary), items, run, config)
    kept, rejections = _collect(outcomes, items, config, started, pool.earlier_ids)
    summary.seconds = time.monotonic() - started
    write_appended(run, STAGE, config.shard_size, kept.sorted_table(), rejections, summary, pool)
    return summary


def _numbered(
    sources: list[str], config: PipelineConfig, items: list[SourceItem], summary: IngestSummary
) -> Iterator[int]:
    """Every candidate item in order; `items[seq]` is the item of sequence number seq."""
    for spec in sources:
        for item in iter_source(spec, config.ingest):
            if item.skipped:
                summary.skipped[item.skipped] += 1
                continue
            items.append(item)
            yield len(items) - 1


def _process(
    seqs: Iterator[int], items: list[SourceItem], run: Path, config: PipelineConfig
) -> Iterator[dict]:
    """Fetch (threads) then decode (processes); yields one outcome dict per item, in order."""
    ing = config.ingest
    decoder = DecodePool(ing.workers, decode_limits(config), str(run / "images"))
    with decoder, LazyClient(ing) as client, ThreadPoolExecutor(ing.download_workers) as threads:

        def prepare(seq: int) -> Future | dict:
            item = items[seq]
            if item.error:
                reason, message = item.error
                return {"seq": seq, "ok": False, "image_id": None, "reason": reason, "message": message}
            if item.url:
                return threads.submit(_download, client, seq, item, ing)
            data, item.data = item.data, None  # `items` lives all run: do not keep the bytes there
            return {"seq": seq, "task": {"seq": seq, "path": item.path, "data": data}}

        def decode(batch: list[dict]) -> Any:
            ready = [entry for entry in batch if "task" not in entry]
            return decoder.submit(ready, [entry["task"] for entry in batch if "task" in entry])

        prepared = ordered(prepare, seqs, window=ing.download_workers * 4)
        for outcomes in ordered(decode, batched(prepared, ing.batch_size), window=ing.workers * 3):
            yield from outcomes


def _download(client: LazyClient, seq: int, item: SourceItem, ing: Any) -> dict:
    try:
        fetched = fetch_url(client.get(), item.url, ing)
    except FetchError as error:
        return {"seq": seq, "ok": False, "image_id": None, "reason": error.reason, "message": error.message}
    return {"seq": seq, "task": {"seq": seq, "path": None, "data": fetched.data}}


def _collect(
    outcomes: Iterator[dict],
    items: list[SourceItem | None],
    config: PipelineConfig,
    started: float,
    earlier: dict[str, str] | None = None,
) -> tuple[KeptImages, list[Rejection]]:
    """Turn outcomes into rows; the first occurrence of an image id wins (input order), and an image
    ingested before (`earlier`: image id -> source, when sources are appended) wins over both."""
    earlier = earlier or {}
    kept = KeptImages()
    rejections: list[Rejection] = []
    progress = Progress(config.ingest.progress_every_n, config.ingest.progress_every_s, started)
    for outcome in outcomes:
        item = items[outcome["seq"]]
        items[outcome["seq"]] = None  # done with it: `items` must not grow with the whole run
        if not outcome["ok"]:
            rejections.append(_rejection(item, outcome))
        elif outcome["image_id"] in kept or outcome["image_id"] in earlier:
            image_id = outcome["image_id"]
            if image_id in earlier:
                message = f"same bytes as image {image_id} from {earlier[image_id]} (ingested before, kept)"
            else:
                kept.fill_missing_metadata(
                    image_id, {f: getattr(item, a) for f, a in METADATA_FIELDS.items()}
                )
                message = f"same bytes as image {image_id} from {kept.source_of(image_id)} (kept)"
            rejections.append(
                Rejection(
                    stage=STAGE,
                    record_id=image_id,
                    reason=EXACT_DUPLICATE,
                    message=message,
                    source=item.source,
                    image_id=image_id,
                )  # fmt: skip
            )
        else:
            try:
                kept.add(_candidate(item, outcome))
            except ValidationError as error:  # metadata a reader could not make fit the schema
                outcome = {**outcome, "reason": "invalid_metadata", "message": str(error).splitlines()[0]}
                rejections.append(_rejection(item, outcome))
        progress.tick(len(kept), len(rejections))
    return kept, rejections


def _rejection(item: SourceItem, outcome: dict) -> Rejection:
    return Rejection(
        stage=STAGE,
        record_id=outcome.get("image_id") or item.source,
        reason=outcome["reason"],
        message=outcome["message"],
        source=item.source,
        image_id=outcome.get("image_id"),
    )


def _candidate(item: SourceItem, outcome: dict) -> CandidateImage:
    return CandidateImage(
        image_id=outcome["image_id"],
        sha256=outcome["sha256"],
        path=outcome["path"],
        source=item.source,
        source_kind=item.source_kind,
        width=outcome["width"],
        height=outcome["height"],
        format=outcome["format"],
        mode=outcome["mode"],
        n_bytes=outcome["n_bytes"],
        source_caption=item.caption,
        licence=item.licence,
        style=item.style,
        artist=item.artist,
        title=item.title,
        orientation_applied=outcome["orientation_applied"],
        converted_from=outcome["converted_from"],
        phash=outcome.get("phash"),
        phash_crops=outcome.get("phash_crops"),
        dhashes=outcome.get("dhashes"),
        hash_version=outcome.get("hash_version"),
    )


def _write(
    run: Path, config: PipelineConfig, kept: KeptImages, rejections: list[Rejection], summary: IngestSummary
) -> None:
    """Shards, then stale-shard cleanup, then rejection shard 0 last: it marks the work as done."""
    size = config.shard_size
    accepted = kept.sorted_table()  # validated rows already: written as they are
    check_columns(STAGE, accepted, IngestStage.writes, "output shards", exact=True)
    shards = 0
    for index, rows in enumerate(shards_of(accepted, size)):
        lio.write_table(lio.shard_path(run, STAGE, index), rows)
        shards += 1
    remove_stale(lio.stage_dir(run, STAGE), "part-", shards)
    chunks = [rejections[i : i + size] for i in range(0, len(rejections), size)] or [[]]
    for index in range(len(chunks) - 1, 0, -1):
        lio.write_rejections(run, STAGE, index, chunks[index])
    remove_stale(run / lio.REJECTIONS_DIR, f"{STAGE}-part-", len(chunks))
    summary.accepted = len(accepted)
    summary.rejected = Counter(r.reason for r in rejections)
    summary.shards = shards
    summary.rejection_shards = len(chunks)
    lio.atomic_write_json(lio.stage_dir(run, STAGE) / SUMMARY_FILE, summary.stats())
    lio.write_rejections(run, STAGE, 0, chunks[0])


class IngestStage(GlobalStage):
    """The stage protocol (`lenses_data.stages.base`) for flows: one global shard (0).

    Ingest orders, deduplicates and shards all sources together, so it is one unit of work; the
    output shards it writes are the input shards of the next stage.
    """

    name = STAGE
    # Config paths (and prompt:<template>) that decide this stage's output (lenses_data.stages.settings_guard).
    output_settings = (
        "shard_size",
        "ingest.sources",
        "ingest.min_side",
        "ingest.max_aspect_ratio",
        "ingest.max_pixels",
        "ingest.max_file_bytes",
        "ingest.max_download_bytes",
        "ingest.allowed_formats",
        "ingest.folder_skip_suffixes",
    )
    input_stage = spec_of(STAGE).input  # as declared; the registry sets the run's
    appends_sources = True  # sources appended to the list are added as new shards (ingest_append)
    reads = ()  # no input frame: the images come from the configured sources
    sources_setting = "ingest.sources"  # the config path naming those sources
    writes = tuple(CandidateImage.model_fields)

    def process_shard(self, run: Path, shard: int) -> ShardStats:
        appended = append_sources(Path(run), self.config)  # None: no source was appended
        return self._stats(shard, appended) if appended else super().process_shard(run, shard)

    def run_shard(self, run: Path, shard: int) -> ShardStats:
        return self._stats(shard, ingest_sources(self.config.ingest.sources, run, self.config))

    def _stats(self, shard: int, summary: IngestSummary) -> ShardStats:
        log.info("%s", summary.format())
        rejected = sum(summary.rejected.values())
        return ShardStats(
            stage=STAGE,
            shard=shard,
            records_in=summary.accepted + rejected,
            records_out=summary.accepted,
            rejected=rejected,
            reasons=dict(summary.rejected),
            extra=summary.stats(),
        )

    def finish(self, run: Path, shards: list[int], stats: list[ShardStats]) -> dict[str, Any]:
        written = json.loads((lio.stage_dir(run, STAGE) / SUMMARY_FILE).read_text())
        lio.mark_stage_complete(run, STAGE, range(written["shards"]), written)
        rejected = sum(written["rejected"].values())
        return {"stage": STAGE, "records_in": written["accepted"] + rejected,
                "records_out": written["accepted"], "rejected": rejected,
                "reasons": written["rejected"], "skipped": written["skipped"]}  # fmt: skip
