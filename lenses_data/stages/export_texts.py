"""What the export reads of a finished run: the final texts (captions and prompts, kept as Arrow and
sorted), the card's light columns of them, and the images that kept at least one text."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa

from lenses_data import io
from lenses_data.annotation.rejection_rows import rejection
from lenses_data.config import PipelineConfig
from lenses_data.config.pipeline import EXPORT, FILTER, INGEST, SPLIT, spec_of
from lenses_data.schemas import CandidateImage, FilterDecision, LensText, SplitAssignment, arrow_schema
from lenses_data.stages._annotate import rejections_frame
from lenses_data.stages.export_tables import ExportText, categorical_codes, read_columns

STAGE = EXPORT  # images left without texts become export's own rejections
# The stage whose texts are final: export's input as declared (a run's own stages may place
# another in between: `final_stage(config)`).
FINAL_STAGE = spec_of(EXPORT).input


def final_stage(config: PipelineConfig) -> str:
    """The stage whose texts a run of `config` exports: the input export reads in that run."""
    return str(spec_of(EXPORT, config).input)


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


def read_final_texts(run: Path, final: str = FINAL_STAGE) -> tuple[pa.Table, pa.Table, pd.DataFrame]:
    """captions, prompts (Arrow, sorted), and one row per distinct (image_id, model, simulated).

    The texts stay Arrow (~0.4 KB a text) all through export: the flat tables and the Hugging Face
    shards are written from Arrow, and the card reads `card_frame`s plus the caption texts in
    batches. As pandas objects (~2.3 KB a text) they were export's peak at 100k candidates. Each
    shard is split by kind as it is read, and only the columns the export writes are read, so the
    whole final table is never held next to the sorted copies. `final`: the stage read
    (`final_stage(config)`)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    full = arrow_schema(LensText)
    wanted = [name for name in full.names if name in arrow_schema(ExportText).names or name == "kind"]
    schema = pa.schema([full.field(name) for name in wanted])
    parts: dict[str, list[pa.Table]] = {"caption": [], "prompt": []}
    light_parts = []
    for path in io.stage_shards(run, final):
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
    splits = io.read_stage(run, SPLIT, SplitAssignment)
    decisions = read_columns(run, FILTER, FilterDecision, ("image_id", "passed"))
    splits = splits[splits["image_id"].isin(set(decisions.loc[decisions["passed"], "image_id"]))]
    del decisions
    wanted = ("image_id", "path", "width", "height", "source", "licence")
    ingest = read_columns(run, INGEST, CandidateImage, wanted)
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
