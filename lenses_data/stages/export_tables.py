"""The export's flat tables: their row models (`ExportImage`, `ExportText`) and the writers that store
lens and split as dictionary columns in the contract's order (pandas reads them as categoricals),
plus a column-limited reader of a stage's shards."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
from pydantic import BaseModel

from lenses_data import io
from lenses_data.schemas import CATEGORICAL_COLUMNS, Record, Split, arrow_schema

# Row groups of the flat tables: sorted by image_id (rejections: by stage and reason), so a reader
# with a range filter (the build report's gallery and examples) skips the groups it does not need.
ROW_GROUP_ROWS = 10_000


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
