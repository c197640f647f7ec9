"""Export stage: the final dataset folder that training and evaluation read.

    images.parquet      image_id, path, width, height, split, source, group_id
    captions.parquet    text_id, image_id, split, lens, text, focus, idioms, edited, original_text,
                        prompt_hash, model, simulated, flags (rules the text breaks without being
                        rejected for it, docs/rules.md)
    prompts.parquet     the same columns, for image-side prompts
    rejections.parquet  every stage's rejections, plus export's own (images left without texts)
    manifest.json       config, models, prompt hashes, package versions, counts per stage, simulated
    README.md + figures/  the dataset card (lenses_data.card), with the Hugging Face metadata block
    card_counts.json    the card's count tables (Table 1, funnel, rejections), which the report shows
    report/index.html + thumbs/  the build report (lenses_data.report; export.report_images, 0: none)
    hf/<config>/<split>-NNNNN-of-NNNNN.parquet  the Hugging Face layout (lenses_data.stages.export_hf):
                        `datasets.load_dataset(out, "captions")`; images embedded with `export.embed_images`

`lens` and `split` are stored so that `pandas.read_parquet` returns categoricals with the five
lens names (and train/valid/test) in the fixed order. The final texts are the visual_validate
output (test texts checked against the image, the other splits passed through).
"""

from __future__ import annotations

import ctypes
import datetime as dt
import gc
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
# Row groups of the flat tables: sorted by image_id (rejections: by stage and reason), so a reader
# with a range filter (the build report's gallery and examples) skips the groups it does not need.
ROW_GROUP_ROWS = 10_000
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


def categorical_codes(column: pa.ChunkedArray | pa.Array, name: str) -> pa.Array:
    """int32 positions of a lens/split column's values in the contract's order (null: unknown)."""
    import pyarrow.compute as pc

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_dictionary(column.type):
        column = column.cast(pa.string())
    names = pa.array(list(CATEGORICAL_COLUMNS[name]), pa.string())
    return pc.index_in(column, value_set=names).cast(pa.int32())


def typed_table(table: pa.Table, model: type[BaseModel]) -> pa.Table:
    """Arrow rows of `model` with lens/split as dictionary columns holding every category in the
    contract's order: what `typed_parquet` writes, without a pandas copy of the texts."""
    columns, fields = [], []
    for field in arrow_schema(model):
        column = table[field.name]
        if field.name in CATEGORICAL_COLUMNS:
            names = pa.array(list(CATEGORICAL_COLUMNS[field.name]), pa.string())
            column = pa.DictionaryArray.from_arrays(categorical_codes(column, field.name), names)
            field = pa.field(field.name, pa.dictionary(pa.int32(), pa.string()), nullable=False)
        columns.append(column.cast(field.type))
        fields.append(field)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def typed_parquet(path: Path, frame: pd.DataFrame | pa.Table, model: type[BaseModel]) -> Path:
    """Write rows of `model` with lens/split as dictionary columns (pandas reads categoricals)."""
    if isinstance(frame, pa.Table):
        return io.write_table(path, typed_table(frame, model), row_group_size=ROW_GROUP_ROWS)
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
    return io.write_table(path, table, row_group_size=ROW_GROUP_ROWS)


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


# The columns of the final texts the card's tables count; the texts themselves stay in Arrow.
CARD_COLUMNS = ("image_id", "split", "lens", "model", "idioms", "flags")
LIGHT_KEYS = ("image_id", "model", "simulated")


def final_texts(texts: pa.Table, kind: str) -> pa.Table:
    """One kind's final texts, sorted by image, lens (contract order) and text id; an unedited
    text's original_text is its text."""
    import pyarrow.compute as pc

    chosen = texts.filter(pc.equal(texts["kind"], kind))
    original = pc.coalesce(chosen["original_text"], chosen["text"])
    chosen = chosen.set_column(chosen.schema.get_field_index("original_text"), "original_text", original)
    for name in ("idioms", "flags"):
        empty = pa.scalar([], type=chosen.schema.field(name).type)
        chosen = chosen.set_column(
            chosen.schema.get_field_index(name), name, pc.fill_null(chosen[name], empty)
        )
    chosen = chosen.append_column("_lens", categorical_codes(chosen["lens"], "lens"))
    order = pc.sort_indices(
        chosen, sort_keys=[("image_id", "ascending"), ("_lens", "ascending"), ("text_id", "ascending")]
    )
    return chosen.drop_columns(["_lens"]).take(order)


def card_frame(texts: pa.Table) -> pd.DataFrame:
    """The card's columns of final texts as pandas (lists as lists), ~0.2 KB a text instead of
    ~2.3 KB with the texts: what the card's counts and plots read."""
    frame = io.typed_frame(texts.select(list(CARD_COLUMNS)))
    for name in ("idioms", "flags"):
        frame[name] = [list(v) for v in frame[name]]
    return frame


def read_final_texts(run: Path) -> tuple[pa.Table, pa.Table, pd.DataFrame]:
    """captions, prompts (Arrow, sorted), and one row per distinct (image_id, model, simulated).

    The texts stay Arrow (~0.4 KB a text) all through export: the flat tables and the Hugging Face
    shards are written from Arrow, and the card reads `card_frame`s plus the caption texts in
    batches. As pandas objects (~2.3 KB a text) they were export's peak at 100k candidates. Each
    shard is split by kind as it is read, and only the columns the export writes are read, so the
    whole final table is never held next to the sorted copies."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    full = arrow_schema(LensText)
    wanted = [name for name in full.names if name in arrow_schema(ExportText).names or name == "kind"]
    schema = pa.schema([full.field(name) for name in wanted])
    parts: dict[str, list[pa.Table]] = {"caption": [], "prompt": []}
    light_parts = []
    for path in io.stage_shards(run, FINAL_STAGE):
        shard = pq.read_table(path, columns=wanted, schema=schema)
        light_parts.append(
            shard.select(["image_id", "model", "simulated"]).group_by(LIGHT_KEYS).aggregate([])
        )
        for kind, tables in parts.items():
            tables.append(shard.filter(pc.equal(shard["kind"], kind)))
        del shard
    light = pa.concat_tables(light_parts) if light_parts else schema.empty_table().select(list(LIGHT_KEYS))
    kinds = {}
    for kind in ("caption", "prompt"):
        texts = pa.concat_tables(parts.pop(kind) or [schema.empty_table()])
        kinds[kind] = final_texts(texts, kind)
        del texts
    pa.default_memory_pool().release_unused()  # the unsorted copies' pages back to the OS
    return kinds["caption"], kinds["prompt"], light.group_by(LIGHT_KEYS).aggregate([]).to_pandas()


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


def export_dataset(run: str | Path, out: str | Path, config: Any = None) -> dict[str, Any]:
    """Write the dataset folder `out` from a finished run; returns the manifest as a dict."""
    from lenses_data.card import write_card
    from lenses_data.card_meta import card_metadata, licence_counts

    run, out = Path(run), Path(out)
    give_back_memory()
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
    rejections = rejections.sort_values(["stage", "reason"], kind="stable", ignore_index=True)
    rejections_table = io.to_table(rejections, Rejection)
    io.write_table(out / "rejections.parquet", rejections_table, row_group_size=ROW_GROUP_ROWS)
    hf_tables = {
        "captions": hf_table(captions, ExportText),
        "prompts": hf_table(prompts, ExportText),
        "images": hf_table(images, ExportImage),
    }
    layout = write_hf_layout(out, hf_tables, rejections_table, export_settings(config))
    del hf_tables
    caption_texts = captions.select(["image_id", "text"])  # the card's diversity reads the texts
    captions, prompts = card_frame(captions), card_frame(prompts)
    give_back_memory()
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
    )
    write_build_report(run, out, export_settings(config))
    return payload


def write_build_report(run: Path, out: Path, settings: ExportConfig) -> None:
    """out/report/index.html (lenses_data.report): the last step of the export; 0 images: none."""
    if settings.report_images <= 0:
        return
    from lenses_data.report import REPORT_DIR, write_report

    done = write_report(
        run,
        out,
        out / REPORT_DIR,
        n=settings.report_images,
        examples=settings.report_examples,
        groups=settings.report_groups,
    )
    log.info("export: report %s (%d images, %.1f s)", done["index"], done["images"], done["seconds"])


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
        "report",
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
