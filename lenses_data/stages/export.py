"""Export stage: the final dataset folder that training and evaluation read.

    images.parquet      image_id, path, width, height, split, source, group_id
    captions.parquet    text_id, image_id, split, lens, text, focus, idioms, edited, original_text,
                        prompt_hash, model, simulated, flags (rules the text breaks without being
                        rejected for it, docs/rules.md)
    prompts.parquet     the same columns, for image-side prompts
    rejections.parquet  every stage's rejections, plus export's own (images left without texts)
    manifest.json       config, models, prompt hashes, package versions, counts per stage, simulated
    README.md + figures/  the dataset card (lenses_data.card), with the Hugging Face metadata block
    hf/<config>/<split>-NNNNN-of-NNNNN.parquet  the Hugging Face layout (lenses_data.stages.export_hf):
                        `datasets.load_dataset(out, "captions")`; images embedded with `export.embed_images`

`lens` and `split` are stored so that `pandas.read_parquet` returns categoricals with the five
lens names (and train/valid/test) in the fixed order. The final texts are the visual_validate
output (test texts checked against the image, the other splits passed through).
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import logging
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
from pydantic import BaseModel

from lenses_data import io
from lenses_data.config.export import ExportConfig
from lenses_data.models.journal import read_run_journal, usage_totals
from lenses_data.prompts import all_prompt_hashes
from lenses_data.schemas import (
    CATEGORICAL_COLUMNS,
    CandidateImage,
    FilterDecision,
    LensText,
    Manifest,
    Record,
    Rejection,
    Split,
    SplitAssignment,
    StageCount,
    arrow_schema,
)
from lenses_data.stages._annotate import rejection, rejections_frame
from lenses_data.stages.base import ShardStats
from lenses_data.stages.export_hf import hf_table, write_hf_layout

log = logging.getLogger(__name__)
STAGE = "export"
FINAL_STAGE = "visual_validate"
COUNTED_STAGES = ("ingest", "dedupe", "filter", "split", "generate", "rules", "validate", "visual_validate")
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


class ExportImage(Record):
    image_id: str
    path: str
    width: int
    height: int
    split: Split
    source: str
    group_id: str


class ExportText(Record):
    text_id: str
    image_id: str
    split: Split
    lens: str
    text: str
    focus: str
    idioms: list[str]
    edited: bool
    original_text: str
    prompt_hash: str
    model: str
    simulated: bool
    flags: list[str]


def typed_parquet(path: Path, frame: pd.DataFrame, model: type[BaseModel]) -> Path:
    """Write rows of `model` with lens/split as dictionary columns (pandas reads categoricals)."""
    schema = arrow_schema(model)
    frame = frame[list(schema.names)].copy()
    fields = []
    for field in schema:
        if field.name in CATEGORICAL_COLUMNS:
            frame[field.name] = pd.Categorical(
                frame[field.name], categories=list(CATEGORICAL_COLUMNS[field.name])
            )
            field = pa.field(field.name, pa.dictionary(pa.int32(), pa.string()), nullable=False)
        fields.append(field)
    table = pa.Table.from_pandas(frame, schema=pa.schema(fields), preserve_index=False)
    return io.write_table(path, table)


def read_columns(
    run: Path, stage: str, model: type[BaseModel], columns: tuple[str, ...], *, require_complete: bool = True
) -> pd.DataFrame:
    """Only the named columns of a stage's shards, typed as `io.read_stage` types them: at 100k
    candidates the export needs a few columns of ingest and filter, not their hashes and answers."""
    import pyarrow.parquet as pq

    full = arrow_schema(model)
    schema = pa.schema([full.field(name) for name in columns])
    paths = io.stage_shards(run, stage, require_complete=require_complete)
    tables = [pq.read_table(path, columns=list(columns), schema=schema) for path in paths]
    return io.typed_frame(pa.concat_tables(tables) if tables else schema.empty_table())


def final_texts(texts: pd.DataFrame, kind: str) -> pd.DataFrame:
    chosen = texts[texts["kind"] == kind].copy()
    chosen["original_text"] = chosen["original_text"].where(chosen["original_text"].notna(), chosen["text"])
    chosen["edited"] = chosen["edited"].astype(bool)
    chosen["idioms"] = chosen["idioms"].apply(lambda v: [] if v is None else list(v))
    chosen["flags"] = chosen["flags"].apply(lambda v: [] if v is None else list(v))
    return chosen.sort_values(["image_id", "lens", "text_id"]).reset_index(drop=True)


def read_final_texts(run: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """captions, prompts, and one row per distinct (image_id, model, simulated) of the final texts.

    The texts are read as one Arrow table (~0.4 KB a text) and only one kind at a time becomes
    pandas objects (~2 KB a text): at 100k candidates (~400k texts) holding every text as objects
    plus the per-kind copies is what made export the build's memory peak."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    schema = arrow_schema(LensText)
    paths = io.stage_shards(run, FINAL_STAGE)
    table = (
        pa.concat_tables([pq.read_table(p, schema=schema) for p in paths]) if paths else schema.empty_table()
    )
    light = (
        table.select(["image_id", "model", "simulated"])
        .group_by(["image_id", "model", "simulated"])
        .aggregate([])
    )
    kinds = {}
    for kind in ("caption", "prompt"):
        kinds[kind] = final_texts(io.typed_frame(table.filter(pc.equal(table["kind"], kind))), kind)
    return kinds["caption"], kinds["prompt"], light.to_pandas()


def final_images(run: Path, texts: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Images the filter passed and the split stage assigned that kept at least one text; the
    others of those become rejections (`no_texts_left`)."""
    splits = io.read_stage(run, "split", SplitAssignment)
    decisions = read_columns(run, "filter", FilterDecision, ("image_id", "passed"))
    splits = splits[splits["image_id"].isin(set(decisions.loc[decisions["passed"], "image_id"]))]
    del decisions
    wanted = ("image_id", "path", "width", "height", "source", "licence")
    ingest = read_columns(run, "ingest", CandidateImage, wanted)
    images = splits.merge(ingest.drop_duplicates("image_id"), on="image_id", how="left")
    images["path"] = images["path"].map(lambda p: str(Path(p).resolve()) if isinstance(p, str) else p)
    with_texts = set(texts["image_id"])
    empty = images[~images["image_id"].isin(with_texts)]
    rejected = rejections_frame(
        rejection(
            STAGE, i, "no_texts_left", "every caption and prompt of this image was rejected", image_id=i
        )
        for i in empty["image_id"]
    )
    kept = images[images["image_id"].isin(with_texts)].sort_values("image_id").reset_index(drop=True)
    return kept, rejected


def stage_counts(run: Path) -> list[StageCount]:
    """Records in/out/rejected per stage, the same numbers as the build's funnel.

    Shard-mapped stages record them in their success marker. Ingest, dedupe and split write
    their own summaries there instead, so their counts come from their Parquet files: out = rows
    (dedupe: the rows it kept), rejected = rows of its rejection files, in = out + rejected.
    """
    counts = []
    for stage in COUNTED_STAGES:
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


def model_info(config: Any, texts: pd.DataFrame, filter_models: set[str]) -> dict[str, dict[str, Any]]:
    info: dict[str, dict[str, Any]] = {}
    models = getattr(config, "models", None)
    for role in ("filter", "generator", "validator", "visual_validator"):
        entry: dict[str, Any] = {}
        if models is not None:
            settings = models.role(role)
            entry = {
                "model": settings.model,
                "revision": settings.serve.revision,
                "base_urls": settings.base_urls,
            }
        info[role] = entry
    info["filter"]["answered_by"] = sorted(filter_models)
    info["generator"]["answered_by"] = sorted(set(texts["model"])) if len(texts) else []
    return info


def gpu_plan(run: Path, config: Any) -> dict[str, Any] | None:
    """The run's GPU-hour plan for the card, or None when it cannot be made (no model stage ran,
    or no config); the export never fails for want of a plan."""
    if config is None or not hasattr(config, "models"):
        return None
    from lenses_data.plan import plan_for_card

    try:
        return plan_for_card(run, config)
    except (ValueError, KeyError, FileNotFoundError, ZeroDivisionError) as error:
        log.warning("export: no GPU-hour plan for the card (%s)", error)
        return None


def export_settings(config: Any) -> ExportConfig:
    return getattr(config, "export", None) or ExportConfig()


def export_dataset(run: str | Path, out: str | Path, config: Any = None) -> dict[str, Any]:
    """Write the dataset folder `out` from a finished run; returns the manifest as a dict."""
    from lenses_data.card import write_card
    from lenses_data.card_meta import card_metadata, licence_counts

    run, out = Path(run), Path(out)
    captions, prompts, texts = read_final_texts(run)  # texts: distinct image_id, model, simulated
    images, empty = final_images(run, texts)
    text_models, texts_simulated = texts[["model"]], bool(texts["simulated"].any())
    del texts
    rejections = (
        pd.concat([io.read_rejections(run), empty], ignore_index=True)
        if len(empty)
        else io.read_rejections(run)
    )
    filters = read_columns(run, "filter", FilterDecision, ("model", "simulated"), require_complete=False)
    simulated = texts_simulated or bool(len(filters) and filters["simulated"].any())

    typed_parquet(out / "images.parquet", images, ExportImage)
    typed_parquet(out / "captions.parquet", captions, ExportText)
    typed_parquet(out / "prompts.parquet", prompts, ExportText)
    rejections_table = io.to_table(rejections, Rejection)
    io.write_table(out / "rejections.parquet", rejections_table)
    hf_tables = {
        "captions": hf_table(captions, ExportText),
        "prompts": hf_table(prompts, ExportText),
        "images": hf_table(images, ExportImage),
    }
    layout = write_hf_layout(out, hf_tables, rejections_table, export_settings(config))
    manifest = Manifest(
        created_at=dt.datetime.now(dt.UTC),
        config=config.model_dump(mode="json") if hasattr(config, "model_dump") else {},
        models=model_info(config, text_models, set(filters["model"]) if len(filters) else set()),
        prompt_hashes=all_prompt_hashes(),
        package_versions=package_versions(),
        counts=stage_counts(run),
        simulated=simulated,
        tables={
            "images.parquet": len(images),
            "captions.parquet": len(captions),
            "prompts.parquet": len(prompts),
            "rejections.parquet": len(rejections),
        },
        usage=usage_totals(read_run_journal(run)),
        gpu_plan=gpu_plan(run, config),
    )
    payload = manifest.model_dump(mode="json")
    io.atomic_write_json(out / "manifest.json", payload)
    metadata = card_metadata(layout, captions, images["licence"], payload)
    write_card(
        out, run, images, captions, prompts, rejections, payload, metadata, licence_counts(images["licence"])
    )
    return payload


class ExportStage:
    """Global stage: one "shard" 0 that writes RUN/export/ (the `lenses export` default)."""

    name = STAGE
    input_stage = FINAL_STAGE
    reads = tuple(LensText.model_fields)
    writes = (
        "images.parquet",
        "captions.parquet",
        "prompts.parquet",
        "rejections.parquet",
        "manifest.json",
        "hf",
    )

    def __init__(self, config: Any, client: Any = None) -> None:
        self.config = config

    def input_shards(self, run: Path) -> list[int]:
        return [0]

    def process_shard(self, run: Path, shard: int) -> ShardStats:
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


def run_stage(run_dir: str | Path, config: Any, client: Any = None) -> dict[str, Any]:
    """Export RUN/export from a finished run (the default of `lenses export`)."""
    from lenses_data.stages.base import run_stage_locally

    return run_stage_locally(ExportStage(config), Path(run_dir))
