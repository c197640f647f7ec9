"""Export stage: the final dataset folder that training and evaluation read.

    images.parquet      image_id, path, width, height, split, source, group_id
    captions.parquet    text_id, image_id, split, lens, text, focus, idioms, edited, original_text,
                        prompt_hash, model, simulated, flags (rules the text breaks without being
                        rejected for it, docs/rules.md)
    prompts.parquet     the same columns, for image-side prompts
    rejections.parquet  every stage's rejections, plus export's own (images left without texts)
    manifest.json       config, models, prompt hashes, package versions, counts per stage, simulated
    README.md + figures/  the dataset card (lenses_data.publish.card), with the Hugging Face metadata block
    card_counts.json    the card's count tables (Table 1, funnel, rejections), which the report shows
    report/index.html + thumbs/  the build report (lenses_data.publish.report; export.report_images, 0: none)
    hf/<config>/<split>-NNNNN-of-NNNNN.parquet  the Hugging Face layout (lenses_data.stages.export_hf):
                        `datasets.load_dataset(out, "captions")`; images embedded with `export.embed_images`

`lens` and `split` are stored so that `pandas.read_parquet` returns categoricals with the five
lens names (and train/valid/test) in the fixed order. The final texts are the visual_validate
output (test texts checked against the image, the other splits passed through).

This module is the stage and `export_dataset`; next to it: `export_texts` (reading the final texts
and images), `export_tables` (the flat tables' row models and writers), `export_hf` (the Hugging Face
layout) and `export_manifest` (stage counts, versions, models and the GPU-hour plan).
"""

from __future__ import annotations

import ctypes
import datetime as dt
import gc
import logging
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from lenses_data import io
from lenses_data.annotation.prompts import all_prompt_hashes
from lenses_data.config import PipelineConfig
from lenses_data.config.export import ExportConfig
from lenses_data.config.pipeline import FILTER, run_specs
from lenses_data.models.journal import read_run_journal, tally_usage
from lenses_data.models.reuse_report import tally_calls
from lenses_data.plan.usage import read_stage_stats
from lenses_data.schemas import FilterDecision, LensText, Manifest, Rejection
from lenses_data.stages.base import ShardStats
from lenses_data.stages.export_hf import hf_table, write_hf_layout
from lenses_data.stages.export_manifest import gpu_plan, model_info, package_versions, stage_counts
from lenses_data.stages.export_tables import (
    ROW_GROUP_ROWS,
    ExportImage,
    ExportText,
    read_columns,
    typed_parquet,
)
from lenses_data.stages.export_texts import (
    FINAL_STAGE,
    STAGE,
    card_frame,
    final_images,
    final_stage,
    read_final_texts,
)
from lenses_data.stages.global_base import GlobalStage

log = logging.getLogger(__name__)


def give_back_memory() -> None:
    """Return freed heap pages to the OS. Export runs last in the coordinator: the annotate stages'
    freed journal entries and frames stay in glibc's heap, where Arrow (its own allocator) cannot
    reuse them, and Arrow's pool keeps pages of its own. Trimming both before and during export
    lowers the build's peak RSS (a 20k export after such garbage: 473 -> 439 MiB)."""
    gc.collect()
    pa.default_memory_pool().release_unused()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to trim
        pass


def export_dataset(run: str | Path, out: str | Path, config: PipelineConfig) -> dict[str, Any]:
    """Write the dataset folder `out` from a finished run; returns the manifest as a dict."""
    from lenses_data.publish.card import write_card
    from lenses_data.publish.card_counts import declared_steps
    from lenses_data.publish.card_meta import card_metadata, licence_counts

    run, out = Path(run), Path(out)
    give_back_memory()
    captions, prompts, texts = read_final_texts(
        run, final_stage(config)
    )  # texts: distinct image_id, model, simulated
    images, empty = final_images(run, texts)
    text_models, texts_simulated = texts[["model"]], bool(texts["simulated"].any())
    del texts
    rejections = (
        pd.concat([io.read_rejections(run), empty], ignore_index=True)
        if len(empty)
        else io.read_rejections(run)
    )
    filters = read_columns(run, FILTER, FilterDecision, ("model", "simulated"), require_complete=False)
    simulated = texts_simulated or bool(len(filters) and filters["simulated"].any())

    typed_parquet(out / "images.parquet", images, ExportImage)
    typed_parquet(out / "captions.parquet", captions, ExportText)
    typed_parquet(out / "prompts.parquet", prompts, ExportText)
    rejections = rejections.sort_values(["stage", "reason"], kind="stable", ignore_index=True)
    rejections_table = io.to_table(rejections, Rejection)
    io.write_table(out / "rejections.parquet", rejections_table, row_group_size=ROW_GROUP_ROWS)
    hf_tables = {
        "captions": hf_table(captions, ExportText),
        "prompts": hf_table(prompts, ExportText),
        "images": hf_table(images, ExportImage),
    }
    layout = write_hf_layout(out, hf_tables, rejections_table, config.export)
    del hf_tables
    caption_texts = captions.select(["image_id", "text"])  # the card's diversity reads the texts
    captions, prompts = card_frame(captions), card_frame(prompts)
    give_back_memory()
    # One reading of the run's journal (~220 MiB at 100k) for both the usage totals and the plan.
    usage: dict[str, dict[str, int]] = {}
    calls: dict[str, dict[str, Any]] = {}
    stage_stats = read_stage_stats(run, tally_usage(tally_calls(read_run_journal(run), calls), usage))
    manifest = Manifest(
        created_at=dt.datetime.now(dt.UTC),
        config=config.model_dump(mode="json") if hasattr(config, "model_dump") else {},
        models=model_info(config, text_models, set(filters["model"]) if len(filters) else set()),
        prompt_hashes=all_prompt_hashes(),
        package_versions=package_versions(),
        counts=stage_counts(run, [spec.name for spec in run_specs(config) if spec.name != STAGE]),
        simulated=simulated,
        tables={
            "images.parquet": len(images),
            "captions.parquet": len(captions),
            "prompts.parquet": len(prompts),
            "rejections.parquet": len(rejections),
        },
        usage=usage,
        gpu_plan=gpu_plan(run, config, stage_stats),
        model_calls=calls,
    )
    payload = manifest.model_dump(mode="json")
    io.atomic_write_json(out / "manifest.json", payload)
    metadata = card_metadata(layout, captions, images["licence"], payload)
    write_card(
        out,
        run,
        images,
        captions,
        prompts,
        rejections,
        payload,
        metadata,
        licence_counts(images["licence"]),
        caption_texts=caption_texts,
        funnel_steps=declared_steps(run_specs(config)),
    )
    write_build_report(run, out, config.export)
    return payload


def write_build_report(run: Path, out: Path, settings: ExportConfig) -> None:
    """out/report/index.html (lenses_data.publish.report): the last step of the export; 0 images: none."""
    if settings.report_images <= 0:
        return
    from lenses_data.publish.report import REPORT_DIR, write_report

    done = write_report(
        run,
        out,
        out / REPORT_DIR,
        n=settings.report_images,
        examples=settings.report_examples,
        groups=settings.report_groups,
    )
    log.info("export: report %s (%d images, %.1f s)", done["index"], done["images"], done["seconds"])


class ExportStage(GlobalStage):
    """Global stage: one "shard" 0 that writes RUN/export/ (the `lenses export` default)."""

    name = STAGE
    # Config paths (and prompt:<template>) that decide this stage's output (lenses_data.stages.settings_guard).
    output_settings = ("export",)
    input_stage = FINAL_STAGE  # as declared; the registry sets the run's
    reads = tuple(LensText.model_fields)
    writes = ()  # no output shard: export writes the named tables and folders below
    output_files = (
        "images.parquet",
        "captions.parquet",
        "prompts.parquet",
        "rejections.parquet",
        "manifest.json",
        "hf",
        "report",
    )

    # Export rewrites its folder on every run (no part files to find a finished shard by).
    skips_finished_shard = False

    def run_shard(self, run: Path, shard: int) -> ShardStats:
        manifest = export_dataset(run, Path(run) / STAGE, self.config)
        tables = manifest["tables"]
        return ShardStats(
            STAGE,
            shard,
            records_in=tables["captions.parquet"] + tables["prompts.parquet"],
            records_out=tables["captions.parquet"] + tables["prompts.parquet"],
            extra={"tables": tables, "simulated": manifest["simulated"]},
        )

    def finish(self, run: Path, shards: list[int], stats: list[ShardStats]) -> dict[str, Any]:
        summary: dict[str, Any] = {"stage": STAGE, "records_in": 0, "records_out": 0, "rejected": 0}
        for item in stats:
            summary.update(records_in=item.records_in, records_out=item.records_out, **item.extra)
        # No part-*.parquet here: the export folder holds the named tables instead.
        marker = io.stage_dir(run, STAGE) / io.SUCCESS_MARKER
        io.atomic_write_json(marker, {"stage": STAGE, "shards": [], "stats": summary})
        return summary
