"""Run layout and Parquet I/O.

A run directory holds one folder per stage with Parquet shards, `RUN/<stage>/part-00042.parquet`,
plus `RUN/<stage>/_SUCCESS.json`, the marker that lists every shard of a finished stage.
Rejections of every stage live in `RUN/rejections/<stage>-part-00042.parquet`.

Writes are atomic (temporary file in the same folder, then `os.replace`), so a reader or a rerun
never sees half a shard, and shard names are deterministic, so a rerun overwrites or skips the
same files instead of adding new ones.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import types
import typing
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from lenses_data.schemas import CATEGORICAL_COLUMNS, Rejection, arrow_schema

if TYPE_CHECKING:
    import pandas as pd
# pandas is imported by the functions that return frames, not here (~0.3 s): a command that
# only writes (ingest) starts its work without it. (pyarrow still imports pandas at the first
# array it builds, by then the decode processes are busy.) A DataFrame or pd.NA can only exist
# once something imported pandas, so the checks below look in sys.modules.


def _loaded_pandas() -> Any:
    return sys.modules.get("pandas")


SUCCESS_MARKER = "_SUCCESS.json"
REJECTIONS_DIR = "rejections"
# Outputs a `--rebuild-changed` moved aside: RUN/_replaced/<settings digest>/ (lenses_data.stages.rebuild).
REPLACED_DIR = "_replaced"


class StageIncompleteError(RuntimeError):
    """Raised when a stage is read before its success marker exists."""


def shard_name(index: int) -> str:
    return f"part-{index:05d}.parquet"


def stage_dir(run: str | Path, stage: str) -> Path:
    return Path(run) / stage


def shard_path(run: str | Path, stage: str, index: int) -> Path:
    return stage_dir(run, stage) / shard_name(index)


def rejection_path(run: str | Path, stage: str, index: int) -> Path:
    return Path(run) / REJECTIONS_DIR / f"{stage}-{shard_name(index)}"


def _read_umask() -> int:
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


# Read once at import (os.umask can only be read by setting it: not safe to do later, with threads).
_FILE_MODE = 0o666 & ~_read_umask()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, _FILE_MODE)  # mkstemp leaves 0600: others could not read shards
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, payload: Any) -> None:
    text = json.dumps(payload, indent=2, sort_keys=True, default=str)
    atomic_write_bytes(path, text.encode("utf-8") + b"\n")


def to_table(records: Sequence[BaseModel] | pd.DataFrame, model: type[BaseModel]) -> pa.Table:
    """Validate rows against their record model and build a table with the derived schema."""
    schema = arrow_schema(model)
    pandas = _loaded_pandas()
    if pandas is not None and isinstance(records, pandas.DataFrame):
        rows = records.to_dict(orient="records")
    else:
        rows = [r.model_dump(mode="python") if isinstance(r, BaseModel) else dict(r) for r in records]
    json_fields = _dict_fields(model)
    validated = [
        _dump_json_fields(model.model_validate(_load_json_fields(_clean_nan(row), json_fields)), json_fields)
        for row in rows
    ]
    columns = {name: [row[name] for row in validated] for name in schema.names}
    return pa.Table.from_pydict(columns, schema=schema)


def columns_to_table(columns: dict[str, Any], model: type[BaseModel]) -> pa.Table:
    """Build a table from whole columns (arrays, Series, lists) a stage computed itself, checked
    column by column instead of row by row: every field present and no other, arrow types,
    no null in a required field, Literal/Enum fields only holding their allowed values.

    For large vectorised outputs (dedupe's records and pairs: 200k rows cost ~6 s through
    `to_table`); rows from outside the stage still go through `to_table`'s pydantic validation.
    """
    import pyarrow.compute as pc

    schema = arrow_schema(model)
    if set(columns) != set(schema.names):
        missing, extra = set(schema.names) - set(columns), set(columns) - set(schema.names)
        raise ValueError(f"{model.__name__}: missing columns {sorted(missing)}, unknown {sorted(extra)}")
    if _dict_fields(model):
        raise TypeError(f"{model.__name__} has JSON (dict) fields: use to_table")
    arrays = []
    for field in schema:
        array = pa.array(columns[field.name], type=field.type, from_pandas=True)  # NaN -> null
        if not field.nullable and array.null_count:
            raise ValueError(
                f"{model.__name__}.{field.name}: {array.null_count} null value(s) in a required field"
            )
        allowed = _allowed_values(model.model_fields[field.name].annotation)
        if allowed is not None and len(array):
            known = pc.is_in(array, value_set=pa.array(allowed, pa.string()))
            bad = pc.and_(pc.is_valid(array), pc.invert(known))  # nulls are the nullability check's
            if pc.any(bad).as_py():
                found = sorted(set(pc.filter(array, bad).to_pylist()))
                raise ValueError(f"{model.__name__}.{field.name}: values {found[:5]} not in {allowed}")
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=schema)


def _allowed_values(annotation: Any) -> list[str] | None:
    """The values a Literal or Enum field (optional or not) may take; None for other fields."""
    from enum import Enum

    args = typing.get_args(annotation) if typing.get_origin(annotation) in (Union, types.UnionType) else ()
    inner = next((a for a in args if a is not type(None)), annotation) if args else annotation
    if typing.get_origin(inner) is typing.Literal:
        return [str(v) for v in typing.get_args(inner)]
    if isinstance(inner, type) and issubclass(inner, Enum):
        return [str(m.value) for m in inner]
    return None


def _dict_fields(model: type[BaseModel]) -> set[str]:
    """Fields annotated as dicts: the arrow schema stores them as JSON text."""
    names = set()
    for name, info in model.model_fields.items():
        annotation = info.annotation
        args = (
            typing.get_args(annotation) if typing.get_origin(annotation) in (Union, types.UnionType) else ()
        )
        candidates = [a for a in args if a is not type(None)] or [annotation]
        if any(typing.get_origin(c) is dict or c is dict for c in candidates):
            names.add(name)
    return names


def _load_json_fields(row: dict[str, Any], names: set[str]) -> dict[str, Any]:
    """Rows read back from Parquet (e.g. a DataFrame) hold those fields as JSON text."""
    return {k: json.loads(v) if k in names and isinstance(v, str) else v for k, v in row.items()}


def _dump_json_fields(record: BaseModel, names: set[str]) -> dict[str, Any]:
    row = record.model_dump(mode="python")
    for name in names:
        if row[name] is not None:
            row[name] = json.dumps(row[name], sort_keys=True, default=str)
    return row


def _clean_nan(row: dict[str, Any]) -> dict[str, Any]:
    """pandas turns missing values into NaN/NA; pydantic wants None."""
    pandas = _loaded_pandas()
    na = pandas.NA if pandas is not None else object()  # a fresh object matches nothing
    cleaned = {}
    for key, value in row.items():
        if value is na or (isinstance(value, float) and value != value):
            value = None
        elif hasattr(value, "tolist") and not isinstance(value, str):
            value = value.tolist()
        cleaned[key] = value
    return cleaned


def write_table(path: Path, table: pa.Table, row_group_size: int | None = None) -> Path:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", row_group_size=row_group_size)
    atomic_write_bytes(path, sink.getvalue().to_pybytes())
    return path


def write_shard(
    run: str | Path,
    stage: str,
    index: int,
    records: Sequence[BaseModel] | pd.DataFrame,
    model: type[BaseModel],
) -> Path:
    """Validate and atomically write one shard of a stage."""
    return write_table(shard_path(run, stage, index), to_table(records, model))


def write_rejections(
    run: str | Path, stage: str, index: int, rejections: Sequence[Rejection] | pd.DataFrame
) -> Path:
    """Write a stage's rejections for one shard (an empty file too: it proves the shard ran)."""
    return write_table(rejection_path(run, stage, index), to_table(rejections, Rejection))


def mark_stage_complete(
    run: str | Path, stage: str, shards: Iterable[int], stats: dict[str, Any] | None = None
) -> Path:
    """Write the success marker; every listed shard must exist."""
    names = [shard_name(i) for i in sorted(set(shards))]
    missing = [n for n in names if not (stage_dir(run, stage) / n).exists()]
    if missing:
        raise FileNotFoundError(f"stage {stage!r}: cannot mark complete, missing shards {missing}")
    marker = stage_dir(run, stage) / SUCCESS_MARKER
    atomic_write_json(marker, {"stage": stage, "shards": names, "stats": stats or {}})
    return marker


def read_marker(run: str | Path, stage: str) -> dict[str, Any] | None:
    marker = stage_dir(run, stage) / SUCCESS_MARKER
    if not marker.exists():
        return None
    return json.loads(marker.read_text())


def stage_is_complete(run: str | Path, stage: str) -> bool:
    marker = read_marker(run, stage)
    if marker is None:
        return False
    return all((stage_dir(run, stage) / name).exists() for name in marker["shards"])


def stage_shards(run: str | Path, stage: str, *, require_complete: bool = True) -> list[Path]:
    """The shard files of a stage, in order; by default only of a finished stage."""
    if require_complete:
        marker = read_marker(run, stage)
        if marker is None or not stage_is_complete(run, stage):
            raise StageIncompleteError(
                f"stage {stage!r} in {run} is not complete (no {SUCCESS_MARKER} or missing shards); "
                f"run `lenses {stage.replace('_', '-')}` first"
            )
        return [stage_dir(run, stage) / name for name in marker["shards"]]
    return sorted(stage_dir(run, stage).glob("part-*.parquet"))


def typed_frame(table: pa.Table) -> pd.DataFrame:
    """pandas frame with categorical lens/split columns in the paper's order."""
    import pandas as pd

    frame = table.to_pandas()
    for column, categories in CATEGORICAL_COLUMNS.items():
        if column in frame.columns:
            frame[column] = pd.Categorical(frame[column], categories=list(categories))
    return frame


def read_parquet_files(paths: Sequence[Path], model: type[BaseModel] | None = None) -> pd.DataFrame:
    if model is not None:
        schema = arrow_schema(model)
        tables = [pq.read_table(p, schema=schema) for p in paths]
        table = pa.concat_tables(tables) if tables else schema.empty_table()
    else:
        tables = [pq.read_table(p) for p in paths]
        if not tables:
            import pandas as pd

            return pd.DataFrame()
        table = pa.concat_tables(tables, promote_options="default")
    return typed_frame(table)


def read_stage(
    run: str | Path,
    stage: str,
    model: type[BaseModel] | None = None,
    *,
    require_complete: bool = True,
) -> pd.DataFrame:
    """All shards of a stage as one typed DataFrame."""
    return read_parquet_files(stage_shards(run, stage, require_complete=require_complete), model)


def read_shard(path: str | Path, model: type[BaseModel] | None = None) -> pd.DataFrame:
    return read_parquet_files([Path(path)], model)


def read_rejections(run: str | Path, stage: str | None = None) -> pd.DataFrame:
    """Rejections of one stage, or of every stage."""
    folder = Path(run) / REJECTIONS_DIR
    pattern = f"{stage}-part-*.parquet" if stage else "*-part-*.parquet"
    return read_parquet_files(sorted(folder.glob(pattern)), Rejection)
