"""Ingest's accepted rows held as Arrow batches: order, first-occurrence metadata and later copies."""

from __future__ import annotations

import hashlib

import pytest

from lenses_data.schemas import CandidateImage
from lenses_data.stages.ingest_rows import KeptImages, shards_of


def _row(n: int, caption: str | None = None) -> CandidateImage:
    digest = hashlib.sha256(str(n).encode()).hexdigest()
    return CandidateImage(
        image_id=digest[:16], sha256=digest, path=f"/data/{n}.jpg", source=f"folder:{n}", source_kind="folder",
        width=64, height=48, format="JPEG", mode="RGB", n_bytes=1000 + n, source_caption=caption,
    )  # fmt: skip


@pytest.mark.parametrize("batch_rows", [3, 1000])  # rows already turned into Arrow, and rows still buffered
def test_rows_come_back_sorted_with_later_metadata_filled_in(batch_rows: int) -> None:
    kept = KeptImages(batch_rows=batch_rows)
    rows = [_row(n, caption="given" if n % 2 else None) for n in range(10)]
    for row in rows:
        kept.add(row)
    assert len(kept) == 10 and rows[4].image_id in kept
    assert kept.source_of(rows[4].image_id) == "folder:4"
    kept.fill_missing_metadata(rows[4].image_id, {"source_caption": "from the tsv", "licence": "cc-by"})
    kept.fill_missing_metadata(rows[5].image_id, {"source_caption": "must not replace the first"})
    table = kept.sorted_table()
    assert table.column("image_id").to_pylist() == sorted(r.image_id for r in rows)
    by_id = {r["image_id"]: r for r in table.to_pylist()}
    assert by_id[rows[4].image_id]["source_caption"] == "from the tsv"
    assert by_id[rows[4].image_id]["licence"] == "cc-by"
    assert by_id[rows[5].image_id]["source_caption"] == "given"
    assert by_id[rows[6].image_id]["source_caption"] is None
    assert [len(part) for part in shards_of(table, 4)] == [4, 4, 2]


def test_no_rows_is_one_empty_shard() -> None:
    table = KeptImages().sorted_table()
    assert len(table) == 0 and [len(part) for part in shards_of(table, 4)] == [0]
