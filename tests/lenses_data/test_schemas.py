"""Record models and the schemas derived from them (lenses_data.schemas)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from pydantic import ValidationError

from lenses_data.schemas import (
    LENS_NAMES,
    CandidateImage,
    DedupeRecord,
    Lens,
    LensText,
    Manifest,
    Record,
    arrow_schema,
    column_names,
)


def _candidate(**overrides) -> CandidateImage:
    values = dict(
        image_id="0123456789abcdef",
        sha256="0123456789abcdef" * 4,
        path="/data/a.jpg",
        source="/data/a.jpg",
        source_kind="folder",
        width=640,
        height=480,
        format="JPEG",
        mode="RGB",
        n_bytes=1234,
    )
    values.update(overrides)
    return CandidateImage(**values)


def test_lens_order_and_index_follow_the_paper() -> None:
    assert LENS_NAMES == ("Literal", "Figurative", "Abstract", "Background", "Emotional")
    assert [lens.index for lens in Lens] == [0, 1, 2, 3, 4]
    assert Lens("Background").index == 3


def test_arrow_schema_types_and_nullability() -> None:
    schema = arrow_schema(CandidateImage)
    assert schema.names == column_names(CandidateImage)
    assert schema.field("width").type == pa.int64() and not schema.field("width").nullable
    assert schema.field("source_kind").type == pa.string()  # Literal -> string
    assert schema.field("source_caption").nullable and schema.field("source_caption").type == pa.string()
    assert schema.field("orientation_applied").type == pa.bool_()
    assert schema.metadata[b"lenses.record"] == b"CandidateImage"
    text = arrow_schema(LensText)
    assert text.field("idioms").type == pa.list_(pa.string())
    assert text.field("lens").type == pa.string()  # enum stored by value
    assert text.field("split").nullable
    assert arrow_schema(DedupeRecord).field("distance").type == pa.float64()


def test_arrow_mapping_of_datetime_and_unsupported_types() -> None:
    class Stamped(Record):
        at: dt.datetime
        maybe: int | None = None

    schema = arrow_schema(Stamped)
    assert schema.field("at").type == pa.timestamp("us", tz="UTC")
    assert schema.field("maybe").nullable

    class Ambiguous(Record):
        value: int | str

    with pytest.raises(TypeError, match="unsupported union"):
        arrow_schema(Ambiguous)

    class Odd(Record):
        value: complex

    with pytest.raises(TypeError, match="no arrow mapping"):
        arrow_schema(Odd)


def test_records_forbid_unknown_fields_and_validate_literals() -> None:
    with pytest.raises(ValidationError, match="extra"):
        _candidate(colour="blue")
    with pytest.raises(ValidationError):
        _candidate(source_kind="ftp")
    assert _candidate().orientation_applied is False and _candidate().converted_from is None


def test_enum_values_are_stored_as_plain_strings() -> None:
    text = LensText(
        text_id="t",
        image_id="i",
        kind="caption",
        lens=Lens.EMOTIONAL,
        text="calm",
        focus="sky",
        prompt_name="p",
        prompt_hash="h",
        model="m",
        simulated=True,
    )
    assert text.model_dump()["lens"] == "Emotional"
    with pytest.raises(ValidationError):
        LensText(**{**text.model_dump(), "lens": "Sarcastic"})


def test_manifest_model_rejects_extra_keys() -> None:
    valid = {
        "created_at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        "config": {},
        "models": {"filter": {"id": "m"}},
        "prompt_hashes": {},
        "package_versions": {},
        "counts": [{"stage": "ingest", "records_in": 3, "records_out": 2, "rejected": 1}],
        "simulated": True,
        "tables": {"images.parquet": 2},
    }
    assert Manifest.model_validate(valid).counts[0].rejected == 1
    with pytest.raises(ValidationError, match="unexpected"):
        Manifest.model_validate({**valid, "unexpected": 1})
