"""The accepted images of an ingest run, held as Arrow columns rather than Python objects.

Ingest must see every candidate before it writes a shard: the first occurrence of an image id
wins, and shards are ordered by image id so that they do not depend on source order. Holding a
million `CandidateImage` objects costs ~3 KB each; the same rows as Arrow record batches cost a
few hundred bytes (paths, captions, hashes), plus one dict entry per image id for the exact-
duplicate check. Rows wait in a small buffer of objects and are converted a batch at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lenses_data import io as lio
from lenses_data.schemas import CandidateImage

# Metadata a later copy of the same bytes may supply when the kept (first) copy lacks it.
METADATA_FIELDS: dict[str, str] = {
    "source_caption": "caption",
    "licence": "licence",
    "style": "style",
    "artist": "artist",
}
_BATCH_ROWS = 2048
SUMMARY_FILE = "_summary.json"  # ingest's counts; leading underscore: Parquet readers of the folder skip it


class KeptImages:
    """Accepted rows in input order; `add` refuses nothing, `row_of` finds a kept image id."""

    def __init__(self, batch_rows: int = _BATCH_ROWS) -> None:
        self._batch_rows = batch_rows
        self._rows: dict[str, int] = {}  # image id -> row number (input order)
        self._pending: list[CandidateImage] = []
        self._tables: list[pa.Table] = []
        self._flushed = 0
        self._missing = bytearray()  # per row: bit i set = METADATA_FIELDS[i] is empty
        self._fixes: dict[str, dict[int, Any]] = {}  # field -> row -> value from a later copy

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, image_id: str) -> bool:
        return image_id in self._rows

    def add(self, row: CandidateImage) -> None:
        self._rows[row.image_id] = len(self._rows)
        mask = sum(1 << i for i, name in enumerate(METADATA_FIELDS) if getattr(row, name) is None)
        self._missing.append(mask)
        self._pending.append(row)
        if len(self._pending) >= self._batch_rows:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            # the rows are validated models already: dump once, check by column (not row by row again)
            rows = [row.model_dump() for row in self._pending]
            columns = {name: [row[name] for row in rows] for name in CandidateImage.model_fields}
            self._tables.append(lio.columns_to_table(columns, CandidateImage))
            self._flushed += len(self._pending)
            self._pending = []

    def source_of(self, image_id: str) -> str:
        row = self._rows[image_id]
        if row >= self._flushed:
            return self._pending[row - self._flushed].source
        for table in self._tables:  # batches are equal-sized but for none: walk them
            if row < len(table):
                return str(table.column("source")[row].as_py())
            row -= len(table)
        raise KeyError(image_id)

    def fill_missing_metadata(self, image_id: str, values: dict[str, Any]) -> None:
        """The kept row stays the first occurrence, but metadata only a later copy has (e.g. the
        TSV caption of a file a folder source gave first) is not thrown away."""
        row = self._rows[image_id]
        for bit, name in enumerate(METADATA_FIELDS):
            value = values.get(name)
            if value is None or not self._missing[row] & (1 << bit):
                continue
            self._missing[row] &= ~(1 << bit) & 0xFF
            if row >= self._flushed:
                setattr(self._pending[row - self._flushed], name, value)
            else:
                self._fixes.setdefault(name, {})[row] = value

    def sorted_table(self) -> pa.Table:
        """Every kept row, later metadata applied, ordered by image id."""
        self._flush()
        table = pa.concat_tables(self._tables) if self._tables else lio.to_table([], CandidateImage)
        for name, fixes in self._fixes.items():
            values = table.column(name).to_pylist()
            for row, value in fixes.items():
                values[row] = value
            index = table.schema.get_field_index(name)
            column = table.schema.field(index)
            table = table.set_column(index, column, pa.array(values, column.type))
        return table.take(pc.sort_indices(table, sort_keys=[("image_id", "ascending")]))


def shards_of(table: pa.Table, size: int) -> Iterator[pa.Table]:
    """Consecutive slices of `size` rows (one empty slice for an empty table)."""
    if len(table) == 0:
        yield table
        return
    for start in range(0, len(table), size):
        yield table.slice(start, size)


def remove_stale(folder: Path, prefix: str, keep: int) -> None:
    """A rerun with fewer shards must not leave old ones behind (pandas reads the whole folder)."""
    for path in folder.glob(f"{prefix}*.parquet"):
        index = path.name[len(prefix) :].split(".")[0]
        if index.isdigit() and int(index) >= keep:
            path.unlink()
