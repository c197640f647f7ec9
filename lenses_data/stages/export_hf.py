"""The Hugging Face layout of an export: `datasets.load_dataset(export_dir, "captions")`.

    hf/captions/{train,valid,test}-00000-of-00001.parquet   (likewise prompts and images)
    README.md   front matter: one config per table, one data_files entry per split, features

Why per-split files next to the flat tables, and not the flat tables with `split` as a column:
the flat tables store `lens` and `split` as Arrow dictionary columns so that pandas reads them as
categoricals in the paper's order; `datasets` (5.2) cannot cast a dictionary column to a
`ClassLabel` (it tries to parse "train" as an integer), and a single Hugging Face split holding
every row would put test rows under `ds["train"]`. So the Hugging Face files store `lens` and
`split` as ClassLabel integer codes, one group of files per split, and the flat tables stay the
contract for pandas, DuckDB and training. The text tables are small next to the images, so the
second copy costs little; `rejections.parquet` has no categorical columns and is read in place.

With `export.embed_images` the images config also gets an `image` column holding the bytes
(`datasets.Image`: a struct of bytes and a file name), sharded to about `export.shard_mb`, so the
images survive a copy to a machine where the build's paths do not exist.

This module never imports `datasets`: the layout is plain Parquet plus YAML.
"""

from __future__ import annotations

import io as stdio
import math
import os
import shutil
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from lenses_data.config.export import ExportConfig
from lenses_data.ids import image_id_from_bytes
from lenses_data.schemas import CATEGORICAL_COLUMNS, SPLIT_NAMES, arrow_schema

HF_DIR = "hf"
TEXT_CONFIGS = ("captions", "prompts")
IMAGE_STRUCT = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
FULL_SPLIT = "full"  # the one split of the rejections config ("all" is reserved by `datasets`)
IMAGE_ROW_GROUP = 100  # rows per row group of embedded shards: `datasets` reads one row group at a time


def class_label(names: Iterable[str]) -> dict[str, Any]:
    """A ClassLabel in the card's YAML: `{class_label: {names: {'0': Literal, ...}}}`."""
    return {"class_label": {"names": {str(i): name for i, name in enumerate(names)}}}


def _dtype(arrow_type: pa.DataType) -> Any:
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return {"list": _dtype(arrow_type.value_type)}
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "string"
    if pa.types.is_boolean(arrow_type):
        return "bool"
    if arrow_type == IMAGE_STRUCT:
        return "image"
    if pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type):
        return str(arrow_type)  # int64, float64, ...: the same names in `datasets`
    if pa.types.is_timestamp(arrow_type):
        return (
            f"timestamp[{arrow_type.unit}, tz={arrow_type.tz}]"
            if arrow_type.tz
            else f"timestamp[{arrow_type.unit}]"
        )
    raise TypeError(f"no Hugging Face feature for {arrow_type}")


def features(schema: pa.Schema) -> list[dict[str, Any]]:
    """The `dataset_info.features` list of the card for a table written by `hf_table`."""
    items = []
    for field in schema:
        if field.name in CATEGORICAL_COLUMNS:
            items.append({"name": field.name, "dtype": class_label(CATEGORICAL_COLUMNS[field.name])})
            continue
        dtype = _dtype(field.type)
        items.append({"name": field.name, **(dtype if isinstance(dtype, dict) else {"dtype": dtype})})
    return items


def _arrow_hf_table(table: pa.Table, model: type[BaseModel]) -> pa.Table:
    """`hf_table` of an Arrow table: the texts never become pandas objects."""
    import pyarrow.compute as pc

    from lenses_data.stages.export_tables import categorical_codes

    columns, fields = [], []
    for field in arrow_schema(model):
        column = table[field.name]
        if field.name in CATEGORICAL_COLUMNS:
            codes = categorical_codes(column, field.name)
            if codes.null_count:
                unknown = pc.unique(pc.filter(column, pc.is_null(codes))).to_pylist()
                names = list(CATEGORICAL_COLUMNS[field.name])
                raise ValueError(f"{field.name} values outside {names}: {sorted(map(str, unknown))}")
            column, field = codes.cast(pa.int64()), pa.field(field.name, pa.int64(), nullable=False)
        columns.append(column.cast(field.type))
        fields.append(field)
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def hf_table(frame: pd.DataFrame | pa.Table, model: type[BaseModel]) -> pa.Table:
    """Rows of `model` with each categorical column as int64 codes in the contract's order."""
    if isinstance(frame, pa.Table):
        return _arrow_hf_table(frame, model)
    schema = arrow_schema(model)
    frame = frame[list(schema.names)].copy()
    fields = []
    for field in schema:
        if field.name in CATEGORICAL_COLUMNS:
            names = list(CATEGORICAL_COLUMNS[field.name])
            codes = frame[field.name].astype(str).map({name: i for i, name in enumerate(names)})
            if codes.isna().any():
                unknown = sorted(set(frame.loc[codes.isna(), field.name].astype(str)))
                raise ValueError(f"{field.name} values outside {names}: {unknown}")
            frame[field.name] = codes.astype("int64")
            field = pa.field(field.name, pa.int64(), nullable=False)
        fields.append(field)
    return pa.Table.from_pandas(frame, schema=pa.schema(fields), preserve_index=False)


class ShardWriter:
    """Writes tables of one split as `<split>-NNNNN-of-NNNNN.parquet` files of about `max_bytes`."""

    def __init__(self, folder: Path, split: str, max_bytes: int, row_group_size: int | None = None) -> None:
        self.folder, self.split, self.max_bytes = folder, split, max_bytes
        self.row_group_size = row_group_size
        self.pending: list[pa.Table] = []
        self.size = 0
        self.rows = self.nbytes = 0  # totals over the split: the card's num_examples and num_bytes
        self.written: list[Path] = []

    def add(self, table: pa.Table) -> None:
        self.pending.append(table)
        self.size += table.nbytes
        self.rows += len(table)
        self.nbytes += table.nbytes
        if self.size >= self.max_bytes:
            self._flush()

    def _flush(self) -> None:
        table = pa.concat_tables(self.pending)
        path = self.folder / f".{self.split}-{len(self.written):05d}.parquet"
        self.folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path, compression="zstd", row_group_size=self.row_group_size)
        self.written.append(path)
        self.pending, self.size = [], 0

    def close(self) -> dict[str, int]:
        """Flush the rest and name the files `-of-N`; returns the split's rows, in-memory bytes and
        bytes on disk. An empty split gets no file: `datasets` cannot load a split without rows."""
        if self.rows and self.pending:
            self._flush()
        total = len(self.written)
        on_disk = 0
        for index, path in enumerate(self.written):
            target = path.with_name(f"{self.split}-{index:05d}-of-{total:05d}.parquet")
            os.replace(path, target)
            on_disk += target.stat().st_size
        return {"rows": self.rows, "nbytes": self.nbytes, "files": total, "file_bytes": on_disk}


def _slices(table: pa.Table, max_bytes: int) -> Iterator[pa.Table]:
    """Row slices of `table` of at most about `max_bytes` each (so a shard can end mid-table)."""
    rows = max(1, math.floor(len(table) * max_bytes / max(table.nbytes, 1)))
    for start in range(0, len(table), rows):
        yield table.slice(start, rows)


def write_split_tables(folder: Path, table: pa.Table, max_bytes: int) -> dict[str, dict[str, int]]:
    """One group of shards per split of a table made by `hf_table`; `ShardWriter.close` per split."""
    split_codes = table.column("split").to_numpy()
    rows = {}
    for code, split in enumerate(SPLIT_NAMES):
        part = table.filter(pa.array(split_codes == code))
        writer = ShardWriter(folder, split, max_bytes)
        for piece in _slices(part, max_bytes):
            writer.add(piece)
        rows[split] = writer.close()
    return rows


class ImageGone(FileNotFoundError):
    """The file ingest accepted for an image is missing or holds other bytes now."""


def embedded_cell(path: str, image_id: str, max_side: int | None, quality: int) -> dict[str, Any]:
    """One `datasets.Image` value: the file's bytes, or a JPEG whose longer side is `max_side`.
    The bytes must still hash to the image id, so the embedded image is the one annotated."""
    if not Path(path).is_file():
        raise ImageGone(f"image {image_id}: {path} no longer exists, cannot embed it")
    data = Path(path).read_bytes()
    if image_id_from_bytes(data) != image_id:
        raise ImageGone(f"image {image_id}: {path} has changed since ingest, cannot embed it")
    if max_side is None:
        return {"bytes": data, "path": f"{image_id}{Path(path).suffix.lower()}"}
    from lenses_data.candidates.imaging import load_rgb

    image = load_rgb(data)
    image.thumbnail((max_side, max_side))  # keeps the aspect ratio, never enlarges
    buffer = stdio.BytesIO()
    image.save(buffer, format="JPEG", quality=quality)
    return {"bytes": buffer.getvalue(), "path": f"{image_id}.jpg"}


def embedded_schema(schema: pa.Schema) -> pa.Schema:
    return schema.append(pa.field("image", IMAGE_STRUCT))


def _with_images(chunk: pa.Table, settings: ExportConfig, pool: ThreadPoolExecutor) -> pa.Table:
    def cell(item: tuple[str, str]) -> dict[str, Any]:
        return embedded_cell(item[0], item[1], settings.embed_max_side, settings.embed_jpeg_quality)

    pairs = zip(chunk.column("path").to_pylist(), chunk.column("image_id").to_pylist(), strict=True)
    cells = list(pool.map(cell, pairs))  # in order: row i keeps image i
    return pa.Table.from_arrays(
        [*chunk.columns, pa.array(cells, IMAGE_STRUCT)], schema=embedded_schema(chunk.schema)
    )


def write_embedded_images(
    folder: Path, table: pa.Table, settings: ExportConfig, max_bytes: int
) -> dict[str, dict[str, int]]:
    """The images config with an `image` column, streamed so that about one shard is in memory."""
    batch = 64
    rows = {}
    split_codes = table.column("split").to_numpy()
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        for code, split in enumerate(SPLIT_NAMES):
            part = table.filter(pa.array(split_codes == code))
            writer = ShardWriter(folder, split, max_bytes, row_group_size=IMAGE_ROW_GROUP)
            for start in range(0, len(part), batch):
                embedded = _with_images(part.slice(start, batch), settings, pool)
                for row in range(len(embedded)):  # row by row, so a shard ends where it fills up
                    writer.add(embedded.slice(row, 1))
            rows[split] = writer.close()
    return rows


def _entry(name: str, schema: pa.Schema, splits: dict[str, dict[str, int]], paths: dict[str, str]):
    splits = {split: sizes for split, sizes in splits.items() if sizes["rows"]}
    config: dict[str, Any] = {"config_name": name}
    if name == "captions":
        config["default"] = True
    config["data_files"] = [{"split": s, "path": p} for s, p in paths.items() if s in splits]
    info = {
        "config_name": name,
        "features": features(schema),
        "splits": [
            {"name": s, "num_bytes": int(v["nbytes"]), "num_examples": int(v["rows"])}
            for s, v in splits.items()
        ],
        "download_size": int(sum(v["file_bytes"] for v in splits.values())),
        "dataset_size": int(sum(v["nbytes"] for v in splits.values())),
    }
    return config, info


def write_hf_layout(
    out: Path, tables: dict[str, pa.Table], rejections: pa.Table, settings: ExportConfig
) -> dict[str, Any]:
    """Write out/hf/ from `hf_table` outputs (captions, prompts, images); returns the card's
    `configs` and `dataset_info` lists, and `empty`: the config/split pairs left out for want of rows
    (`datasets` cannot load a split without rows). Built beside and swapped in, so no stale shard
    survives a re-export."""
    max_bytes = int(settings.shard_mb * 1_000_000)
    staging = out / f".{HF_DIR}.building"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    entries = []
    for name in (*TEXT_CONFIGS, "images"):
        table = tables[name]
        if name == "images" and settings.embed_images:
            splits = write_embedded_images(staging / name, table, settings, max_bytes)
            schema = embedded_schema(table.schema)
        else:
            splits, schema = write_split_tables(staging / name, table, max_bytes), table.schema
        entries.append((name, schema, splits, {s: f"{HF_DIR}/{name}/{s}-*.parquet" for s in splits}))
    whole = out / "rejections.parquet"
    size = {"rows": len(rejections), "nbytes": rejections.nbytes, "file_bytes": whole.stat().st_size}
    entries.append(("rejections", rejections.schema, {FULL_SPLIT: size}, {FULL_SPLIT: whole.name}))
    configs, infos = [], []
    for entry in entries:
        config, info = _entry(*entry)
        if config["data_files"]:
            configs.append(config)
            infos.append(info)
    empty = [f"{name}/{s}" for name, _, splits, _ in entries for s, v in splits.items() if not v["rows"]]
    shutil.rmtree(out / HF_DIR, ignore_errors=True)
    os.replace(staging, out / HF_DIR)
    return {
        "configs": configs,
        "dataset_info": infos,
        "empty": empty,
        "embedded_images": bool(settings.embed_images),
    }
