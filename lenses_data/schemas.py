"""Record schemas: one pydantic model per table, the single source of truth.

The Parquet (pyarrow) schema of a table is derived from its model (`arrow_schema`); nothing is
written twice. The JSON schemas sent to models describe answers, not tables: they are derived from
the answer models in `lenses_data.annotation.answers` (`array_schema`).
"""

from __future__ import annotations

import datetime as dt
import types
import typing
from enum import Enum, StrEnum
from typing import Any, Literal, Union

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, field_validator


class Lens(StrEnum):
    """The five interpretive lenses, in the paper's order (index 0-4 everywhere)."""

    LITERAL = "Literal"
    FIGURATIVE = "Figurative"
    ABSTRACT = "Abstract"
    BACKGROUND = "Background"
    EMOTIONAL = "Emotional"

    @property
    def index(self) -> int:
        return LENS_NAMES.index(self.value)


LENS_NAMES: tuple[str, ...] = tuple(lens.value for lens in Lens)
# The same lenses as lower-case keys, for metric tables and configs ("literal", ..., "emotional").
LENS_KEYS: tuple[str, ...] = tuple(name.lower() for name in LENS_NAMES)
SPLIT_NAMES: tuple[str, ...] = ("train", "valid", "test")

Split = Literal["train", "valid", "test"]
TextKind = Literal["prompt", "caption"]
DedupeSignal = Literal["phash", "clip", "both", "phash_crop"]

# Categorical columns: pandas readers get these categories in this order.
CATEGORICAL_COLUMNS: dict[str, tuple[str, ...]] = {"lens": LENS_NAMES, "split": SPLIT_NAMES}


class Record(BaseModel):
    """Base for all table rows: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid", use_enum_values=True)


class CandidateImage(Record):
    """One decoded, accepted candidate image (output of ingest)."""

    image_id: str = Field(description="First 16 hex chars of the sha256 of the file bytes")
    sha256: str
    path: str = Field(description="Local file holding the image bytes (source file or materialised copy)")
    source: str = Field(description="Where the image came from: file path, URL, or archive member")
    source_kind: Literal["folder", "tsv", "parquet", "webdataset", "wikiart"]
    width: int
    height: int
    format: str = Field(description="Format detected from content, not from the file name")
    mode: str = Field(description="PIL mode of the decoded image before conversion to RGB")
    n_bytes: int
    source_caption: str | None = None
    licence: str | None = None
    style: str | None = None
    artist: str | None = None
    title: str | None = None
    orientation_applied: bool = False
    converted_from: str | None = Field(default=None, description="Original mode if converted, e.g. CMYK")
    phash: int | None = Field(
        default=None, description="imagehash pHash of the decoded view (short side >= 64 px), signed int64"
    )
    phash_crops: list[int] | None = Field(
        default=None, description="pHashes of the view's centre crops (2.5% and 5% cut per side)"
    )
    dhashes: list[int] | None = Field(default=None, description="dHashes of the view and of the two crops")
    hash_version: str | None = Field(
        default=None, description="How the hashes were made; dedupe rehashes rows of another version"
    )


class Rejection(Record):
    """Anything that did not make it through a stage, with the stage and the reason."""

    stage: str
    record_id: str = Field(description="Image id, text id, or source path/URL when no id exists yet")
    reason: str = Field(description="Machine-readable reason code, e.g. truncated_image")
    message: str = Field(description="Human-readable explanation")
    source: str | None = None
    image_id: str | None = None
    raw: str | None = Field(default=None, description="Raw model answer, when a model was involved")


class DedupeRecord(Record):
    image_id: str
    phash: int = Field(description="64-bit perceptual hash as a signed int64")
    group_id: str
    kept: bool
    duplicate_of: str | None = None
    signal: DedupeSignal | None = None
    distance: float | None = Field(
        default=None,
        description="Of the pair that removed it: Hamming bits (phash, both), aligned crop bits (phash_crop) "
        "or 1-cosine (clip)",
    )
    cluster_id: int | None = None
    linked_via: str | None = Field(default=None, description="Group member whose pair linked this one")
    split_group_id: str | None = Field(
        default=None, description="Removal group widened by leakage-threshold pairs; a split never cuts it"
    )


class DedupePair(Record):
    """One neighbour pair found by dedupe (removal or leakage tier), for audits and leakage reports."""

    image_a: str
    image_b: str
    signal: DedupeSignal
    hamming: int | None = None
    cosine: float | None = None
    tier: Literal["duplicate", "leakage"]
    aligned: int | None = Field(
        default=None,
        description="Aligned centre-crop pHash bits, where the crop signal confirmed the pair; "
        "null in runs written before this column",
    )


class SplitAssignment(Record):
    image_id: str
    group_id: str
    split: Split


class FilterDecision(Record):
    image_id: str
    decision: Literal["YES", "NO"]
    passed: bool
    raw: str
    model: str
    prompt_hash: str
    simulated: bool


class LensText(Record):
    """An image-side prompt or a caption, under one lens."""

    text_id: str
    image_id: str
    kind: TextKind
    lens: Lens
    text: str
    focus: str
    idioms: list[str] = Field(default_factory=list)
    candidate_index: int = 0
    prompt_name: str
    prompt_hash: str
    model: str
    simulated: bool
    edited: bool = False
    original_text: str | None = None
    split: Split | None = None
    flags: list[str] = Field(
        default_factory=list,
        description="Reason codes of rules the text breaks that do not reject it (docs/rules.md), "
        "e.g. figurative_missing_idiom, word_count_high",
    )

    @field_validator("flags", mode="before")
    @classmethod
    def _no_flags(cls, value: Any) -> Any:
        # Rows built before the rule checks carry no flags column: missing means none.
        return [] if value is None else value


class StageCount(BaseModel):
    stage: str
    records_in: int
    records_out: int
    rejected: int


class Manifest(BaseModel):
    """What a finished export was built from."""

    model_config = ConfigDict(extra="forbid")

    created_at: dt.datetime
    config: dict[str, Any]
    models: dict[str, dict[str, Any]] = Field(description="role -> model id, revision, endpoint kind")
    prompt_hashes: dict[str, str]
    package_versions: dict[str, str]
    counts: list[StageCount]
    simulated: bool
    tables: dict[str, int] = Field(description="file name -> row count")
    usage: dict[str, dict[str, int]] = Field(
        default_factory=dict,
        description="model id -> requests and tokens, summed over the per-shard journals",
    )
    gpu_plan: dict[str, Any] | None = Field(
        None, description="`lenses plan` of this run at its own size (GPU-hours per stage, assumptions)"
    )
    model_calls: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="stage -> calls_sent (model calls its journaled answers cost) and answers_reused "
        "(source run -> answers copied from that run's journal: models.reuse_answers_from)",
    )


# ---------------------------------------------------------------------------------------------
# Derivations


def _arrow_type(annotation: Any) -> tuple[pa.DataType, bool]:
    """Map a field annotation to (arrow type, nullable)."""
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"unsupported union {annotation!r}")
        return _arrow_type(args[0])[0], True
    if origin is Literal:
        return pa.string(), False
    if origin in (list, tuple):
        (item,) = typing.get_args(annotation)[:1]
        return pa.list_(_arrow_type(item)[0]), False
    if origin is dict:
        return pa.string(), False  # stored as JSON text
    scalar = {
        str: pa.string(),
        int: pa.int64(),
        float: pa.float64(),
        bool: pa.bool_(),
        dt.datetime: pa.timestamp("us", tz="UTC"),
    }
    if annotation in scalar:
        return scalar[annotation], False
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return pa.string(), False
    raise TypeError(f"no arrow mapping for {annotation!r}")


def arrow_schema(model: type[BaseModel]) -> pa.Schema:
    """The Parquet schema of a table, derived from its record model."""
    fields = []
    for name, info in model.model_fields.items():
        arrow_type, nullable = _arrow_type(info.annotation)
        fields.append(pa.field(name, arrow_type, nullable=nullable))
    return pa.schema(fields, metadata={b"lenses.record": model.__name__.encode()})


def column_names(model: type[BaseModel]) -> list[str]:
    return list(model.model_fields)
