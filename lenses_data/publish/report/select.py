"""What the build report shows, read so that its cost follows N (the gallery size), not the dataset.

- The gallery is N consecutive rows of `images.parquet` from a seeded start. The table is sorted by
  `image_id`, a sha256 prefix, so a block of consecutive ids is a uniform random sample of images;
  their texts are one block of `captions.parquet` and `prompts.parquet` (sorted by `image_id` too),
  read with a range filter that skips the other row groups.
- Rejection examples: `rejections.parquet` is sorted by stage and reason, so `head` per reason
  reads the row groups of that reason only; rejected texts are read from the few generate shards
  that hold the chosen examples (`choose_examples`).
- Whole-dataset reads are single id-like columns (ingest `image_id`, generate `text_id`; dedupe:
  the removed rows only, `dupes.py`); wide columns (paths, texts, messages, answers) only for the rows shown.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lenses_data import io
from lenses_data.config.pipeline import INGEST

TEXT_COLUMNS = ("text_id", "image_id", "split", "lens", "text", "focus", "edited", "original_text", "flags")
REJECTION_COLUMNS = ("stage", "reason", "record_id", "image_id", "message", "raw", "source")
CANDIDATES = 50  # rejection rows per reason from which its examples are chosen


def _rows(pf: pq.ParquetFile, start: int, stop: int) -> pa.Table:
    """Rows [start, stop) of a Parquet file, reading only the row groups that hold them."""
    groups, first, offset = [], 0, None
    for index in range(pf.num_row_groups):
        rows = pf.metadata.row_group(index).num_rows
        if first < stop and first + rows > start:
            groups.append(index)
            offset = first if offset is None else offset
        first += rows
    if not groups:
        return pf.schema_arrow.empty_table()
    return pf.read_row_groups(groups).slice(start - offset, stop - start)


def sample_images(export: Path, n: int, seed: int = 0) -> tuple[pd.DataFrame, int]:
    """(N consecutive image rows from a seeded start, rows in images.parquet)."""
    pf = pq.ParquetFile(export / "images.parquet")
    total = pf.metadata.num_rows
    n = min(n, total)
    start = random.Random(seed).randrange(total - n + 1) if total else 0
    return io.typed_frame(_rows(pf, start, start + n)), total


def sample_texts(export: Path, ids: list[str]) -> pd.DataFrame:
    """Captions and prompts of the sampled images (a `kind` column says which)."""
    if not ids:
        return pd.DataFrame(columns=[*TEXT_COLUMNS, "kind"])
    lo, hi = min(ids), max(ids)
    parts = []
    for kind, name in (("caption", "captions.parquet"), ("prompt", "prompts.parquet")):
        table = pq.read_table(
            export / name,
            columns=list(TEXT_COLUMNS),
            filters=[("image_id", ">=", lo), ("image_id", "<=", hi)],
        )
        table = table.filter(pc.is_in(table["image_id"], value_set=pa.array(ids)))
        parts.append(io.typed_frame(table).assign(kind=kind))
    return pd.concat(parts, ignore_index=True)


def lookup(paths: Iterable[Path], key: str, ids: Iterable[str], columns: tuple[str, ...]) -> pd.DataFrame:
    """Rows whose `key` is in `ids`, from shards of any size: the key column is read everywhere,
    the other columns only from shards that hold a wanted id."""
    wanted = pa.array(sorted({i for i in ids if isinstance(i, str)}), type=pa.string())
    parts = []
    for path in paths if len(wanted) else ():
        pf = pq.ParquetFile(path)
        names = pf.schema_arrow.names
        if key not in names:
            continue
        mask = pc.is_in(pf.read(columns=[key]).column(key), value_set=wanted)
        if not pc.any(mask).as_py():
            continue
        parts.append(pf.read(columns=[c for c in columns if c in names]).filter(mask))
    if not parts:
        return pd.DataFrame(columns=list(columns))
    frame = pa.concat_tables(parts, promote_options="default").to_pandas()
    return frame.reindex(columns=list(columns))


def shards(run: Path, stage: str) -> list[Path]:
    folder = io.stage_dir(run, stage)
    return sorted(folder.glob("part-*.parquet")) if folder.exists() else []


def ingest_rows(run: Path, ids: Iterable[str]) -> pd.DataFrame:
    """Path and licence of ingested images (the export's images table has no licence column)."""
    found = lookup(shards(run, INGEST), "image_id", ids, ("image_id", "path", "licence"))
    return found.drop_duplicates("image_id").set_index("image_id")


def rejection_examples(
    export: Path, keys: list[tuple[str, str]], k: int
) -> dict[tuple[str, str], pd.DataFrame]:
    """Up to k rows of each (stage, reason)."""
    import pyarrow.dataset as ds

    path = export / "rejections.parquet"
    if k <= 0 or not keys or not path.exists():
        return {}
    data = ds.dataset(path, format="parquet")
    out = {}
    for stage, reason in keys:
        where = (ds.field("stage") == stage) & (ds.field("reason") == reason)
        out[(stage, reason)] = data.head(k, columns=list(REJECTION_COLUMNS), filter=where).to_pandas()
    return out


def locate(paths: list[Path], key: str, ids: Iterable[str]) -> dict[str, int]:
    """id -> index in `paths` of the shard holding it; only the key column is read."""
    wanted = pa.array(sorted({i for i in ids if isinstance(i, str)}), type=pa.string())
    found: dict[str, int] = {}
    for index, path in enumerate(paths if len(wanted) else ()):
        keys = pq.read_table(path, columns=[key]).column(key)
        found.update(dict.fromkeys(keys.filter(pc.is_in(keys, value_set=wanted)).to_pylist(), index))
    return found


def choose_examples(
    found: dict[tuple[str, str], pd.DataFrame], where: dict[str, int], k: int
) -> dict[tuple[str, str], pd.DataFrame]:
    """k rows per reason. Rows naming a generated text prefer the shards most candidates share, so
    the texts of every reason come from a few generate shards, not from all of them."""
    popular = Counter(where[i] for rows in found.values() for i in rows["record_id"] if i in where)
    rank = {shard: place for place, (shard, _) in enumerate(popular.most_common())}
    chosen = {}
    for key, rows in found.items():
        order = [rank.get(where.get(i), -1) for i in rows["record_id"]]  # -1: not a text, row order kept
        chosen[key] = (
            rows.assign(_rank=order).sort_values("_rank", kind="stable").head(k).drop(columns="_rank")
        )
    return chosen


def rejected_texts(paths: list[Path], where: dict[str, int], text_ids: Iterable[str]) -> pd.DataFrame:
    """The generated texts a text stage rejected (the rejection row holds only the text id), read from
    the shards `locate` found them in."""
    ids = [i for i in text_ids if i in where]
    columns = ("text_id", "kind", "lens", "text", "focus")
    found = lookup(sorted({paths[where[i]] for i in ids}), "text_id", ids, columns)
    return found.drop_duplicates("text_id").set_index("text_id")
