"""Run layout and Parquet I/O (lenses_data.io): atomic writes, markers, typed reads."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from pydantic import ValidationError

from lenses_data import io as lio
from lenses_data.schemas import LENS_NAMES, SPLIT_NAMES, CandidateImage, LensText, Rejection


def _candidates(n: int, offset: int = 0) -> list[CandidateImage]:
    return [
        CandidateImage(
            image_id=f"{i + offset:016x}",
            sha256=f"{i + offset:064x}",
            path=f"/pool/{i}.jpg",
            source=f"/pool/{i}.jpg",
            source_kind="folder",
            width=100 + i,
            height=80,
            format="JPEG",
            mode="RGB",
            n_bytes=1000 + i,
            source_caption=None if i % 2 else f"caption {i}",
            converted_from="CMYK" if i == 1 else None,
        )
        for i in range(n)
    ]


def _texts() -> list[LensText]:
    rows = []
    for i, lens in enumerate(reversed(LENS_NAMES)):  # written out of order on purpose
        rows.append(
            LensText(
                text_id=f"t{i}",
                image_id="img",
                kind="caption",
                lens=lens,
                text=f"text {i}",
                focus="f",
                idioms=["a", "b"] if i == 0 else [],
                prompt_name="p",
                prompt_hash="h",
                model="m",
                simulated=True,
                split=SPLIT_NAMES[i % 3],
            )
        )
    return rows


def test_atomic_write_leaves_no_temp_file_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "stage" / "part-00000.parquet"
    lio.atomic_write_bytes(target, b"old")

    def broken_replace(src, dst):
        raise OSError("disk went away")

    monkeypatch.setattr(lio.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk went away"):
        lio.atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"old"  # the previous version is intact
    assert sorted(p.name for p in target.parent.iterdir()) == ["part-00000.parquet"]


def test_invalid_rows_write_nothing(tmp_path: Path) -> None:
    bad = [{**_candidates(1)[0].model_dump(), "width": "wide"}]
    with pytest.raises(ValidationError):
        lio.write_shard(tmp_path, "ingest", 0, bad, CandidateImage)
    assert not lio.shard_path(tmp_path, "ingest", 0).exists()


def test_written_files_are_readable_by_others(tmp_path: Path) -> None:
    path = lio.write_shard(tmp_path, "ingest", 0, _candidates(2), CandidateImage)
    old_umask = os.umask(0o022)
    os.umask(old_umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~old_umask


def test_round_trip_of_models(tmp_path: Path) -> None:
    rows = _candidates(5)
    lio.write_shard(tmp_path, "ingest", 0, rows, CandidateImage)
    lio.mark_stage_complete(tmp_path, "ingest", [0])
    frame = lio.read_stage(tmp_path, "ingest", CandidateImage)
    back = [CandidateImage.model_validate(lio._clean_nan(r)) for r in frame.to_dict(orient="records")]
    assert back == rows
    # A DataFrame goes back in through the same validation.
    lio.write_shard(tmp_path, "copy", 0, frame, CandidateImage)
    assert lio.read_shard(lio.shard_path(tmp_path, "copy", 0), CandidateImage).equals(frame)


def test_marker_lists_shards_and_incomplete_stage_read_raises(tmp_path: Path) -> None:
    lio.write_shard(tmp_path, "dedupe", 0, _candidates(2), CandidateImage)
    lio.write_shard(tmp_path, "dedupe", 1, _candidates(2, offset=10), CandidateImage)
    assert not lio.stage_is_complete(tmp_path, "dedupe")
    with pytest.raises(lio.StageIncompleteError, match="lenses dedupe"):
        lio.read_stage(tmp_path, "dedupe")
    assert len(lio.read_stage(tmp_path, "dedupe", require_complete=False)) == 4
    with pytest.raises(FileNotFoundError, match="part-00002"):
        lio.mark_stage_complete(tmp_path, "dedupe", [0, 1, 2])
    lio.mark_stage_complete(tmp_path, "dedupe", [1, 0, 1], {"rows": 4})
    marker = lio.read_marker(tmp_path, "dedupe")
    assert marker == {
        "stage": "dedupe",
        "shards": ["part-00000.parquet", "part-00001.parquet"],
        "stats": {"rows": 4},
    }
    assert lio.stage_is_complete(tmp_path, "dedupe")
    lio.shard_path(tmp_path, "dedupe", 1).unlink()  # a listed shard vanished: not complete any more
    assert not lio.stage_is_complete(tmp_path, "dedupe")
    with pytest.raises(lio.StageIncompleteError):
        lio.read_stage(tmp_path, "dedupe")


def test_typed_categorical_lens_and_split_columns(tmp_path: Path) -> None:
    lio.write_shard(tmp_path, "generate", 0, _texts(), LensText)
    lio.mark_stage_complete(tmp_path, "generate", [0])
    frame = lio.read_stage(tmp_path, "generate")
    assert isinstance(frame["lens"].dtype, pd.CategoricalDtype)
    assert list(frame["lens"].cat.categories) == list(LENS_NAMES)
    assert list(frame.sort_values("lens")["lens"]) == list(LENS_NAMES)  # sorts in the paper's order
    assert list(frame["split"].cat.categories) == list(SPLIT_NAMES)
    assert list(frame["idioms"].iloc[0]) == ["a", "b"]


def test_pandas_reads_stage_folder_despite_marker(tmp_path: Path) -> None:
    lio.write_shard(tmp_path, "ingest", 0, _candidates(3), CandidateImage)
    lio.write_shard(tmp_path, "ingest", 1, _candidates(2, offset=3), CandidateImage)
    lio.mark_stage_complete(tmp_path, "ingest", [0, 1])
    assert (tmp_path / "ingest" / lio.SUCCESS_MARKER).exists()
    frame = pd.read_parquet(tmp_path / "ingest")
    assert len(frame) == 5 and list(frame.columns) == list(CandidateImage.model_fields)


def test_empty_stage_and_rejections(tmp_path: Path) -> None:
    lio.write_shard(tmp_path, "filter", 0, [], CandidateImage)
    lio.mark_stage_complete(tmp_path, "filter", [0])
    empty = lio.read_stage(tmp_path, "filter", CandidateImage)
    assert empty.empty and list(empty.columns) == list(CandidateImage.model_fields)
    lio.write_rejections(tmp_path, "filter", 0, [])
    reasons = [Rejection(stage="ingest", record_id="x", reason="too_small", message="m")]
    lio.write_rejections(tmp_path, "ingest", 0, reasons)
    assert len(lio.read_rejections(tmp_path)) == 1
    assert list(lio.read_rejections(tmp_path, "ingest")["reason"]) == ["too_small"]
    assert lio.read_rejections(tmp_path, "filter").empty
    assert lio.rejection_path(tmp_path, "ingest", 3).name == "ingest-part-00003.parquet"


def test_dict_fields_are_stored_as_json_text_and_round_trip(tmp_path: Path) -> None:
    from lenses_data.schemas import Record, arrow_schema

    class Usage(Record):
        key: str
        usage: dict[str, int]
        extra: dict[str, str] | None = None

    assert arrow_schema(Usage).field("usage").type == pa.string()
    rows = [Usage(key="a", usage={"out": 2, "in": 1}), Usage(key="b", usage={}, extra={"x": "y"})]
    path = lio.write_table(tmp_path / "usage.parquet", lio.to_table(rows, Usage))
    frame = lio.read_shard(path, Usage)
    assert list(frame["usage"]) == ['{"in": 1, "out": 2}', "{}"]
    back = lio.to_table(frame, Usage).to_pylist()  # a frame read back validates again
    assert [Usage.model_validate(lio._load_json_fields(r, {"usage", "extra"})) for r in back] == rows


def test_columns_to_table_equals_the_validated_table_and_checks_each_column() -> None:
    """Columns a stage computed itself make the same table as row-by-row validation, and the
    column checks refuse what pydantic would: a missing or unknown column, a null in a required
    field, a value outside a Literal."""
    import numpy as np

    from lenses_data.schemas import DedupePair

    frame = pd.DataFrame(
        {
            "image_a": ["a", "b", "c"],
            "image_b": ["d", "e", "f"],
            "signal": ["phash", "phash_crop", "clip"],
            "hamming": pd.array([3, 9, None], dtype="Int64"),
            "cosine": [np.nan, np.nan, 0.97],
            "tier": ["duplicate", "duplicate", "leakage"],
            "aligned": pd.array([None, 5, None], dtype="Int64"),
        }
    )
    columns = {name: frame[name] for name in frame}
    assert lio.columns_to_table(columns, DedupePair).equals(lio.to_table(frame, DedupePair))
    with pytest.raises(ValueError, match="signal.*'pHash'"):
        lio.columns_to_table({**columns, "signal": ["phash", "pHash", "clip"]}, DedupePair)
    with pytest.raises(ValueError, match="tier: 1 null"):
        lio.columns_to_table({**columns, "tier": ["duplicate", None, "leakage"]}, DedupePair)
    with pytest.raises(ValueError, match="missing columns \\['tier'\\], unknown \\['extra'\\]"):
        without_tier = {k: v for k, v in columns.items() if k != "tier"}
        lio.columns_to_table({**without_tier, "extra": [1, 2, 3]}, DedupePair)
    with pytest.raises(pa.ArrowInvalid):
        lio.columns_to_table({**columns, "hamming": ["x", "y", "z"]}, DedupePair)
