"""Source readers: turn a source spec into an ordered stream of `SourceItem`s.

Kinds: an image folder (recursive), a CC3M-style TSV/CSV (caption, url), an img2dataset-style
Parquet file (image bytes and/or url), a WebDataset `.tar` shard (key.jpg + key.txt/.json) and
a WikiArt root (`Style/artist_title.jpg`). The kind is detected from the path; a prefix such as
`wikiart:/data/wikiart` forces it. Readers never decode: they only say where the bytes are.
Items are yielded in a deterministic order (sorted paths, file row order, archive order), which
is what makes "keep the first of exact duplicates" reproducible.
Problems with one entry (a malformed row, an archive member that is not a file) become items
carrying an `error`, so they are recorded as rejections instead of being dropped.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lenses_data.candidates.fetch import is_url
from lenses_data.config.ingest import IngestConfig

SOURCE_KINDS = ("folder", "tsv", "parquet", "webdataset", "wikiart")
MALFORMED_ROW = "malformed_row"
MISSING_IMAGE = "missing_image"
UNSUPPORTED_MEMBER = "unsupported_member"
CORRUPT_ARCHIVE = "corrupt_archive"
SYMLINKED_DIRECTORY = "symlinked_directory"

WIKIART_STYLES = frozenset(
    "Abstract_Expressionism Action_painting Analytical_Cubism Art_Nouveau_Modern Baroque "
    "Color_Field_Painting Contemporary_Realism Cubism Early_Renaissance Expressionism Fauvism "
    "High_Renaissance Impressionism Mannerism_Late_Renaissance Minimalism Naive_Art_Primitivism "
    "New_Realism Northern_Renaissance Pointillism Pop_Art Post_Impressionism Realism Rococo "
    "Romanticism Symbolism Synthetic_Cubism Ukiyo_e".split()
)
IMAGE_SUFFIXES = ("jpg", "jpeg", "png", "webp", "gif", "bmp", "tif", "tiff")
_URL_COLUMNS = ("url", "image_url", "img_url", "path", "filepath", "file")
_CAPTION_COLUMNS = ("caption", "text", "txt", "alt", "description")
_LICENCE_COLUMNS = ("license", "licence")
_BYTES_COLUMNS = ("jpg", "jpeg", "png", "webp", "image", "image_bytes", "img", "bytes")


class SourceError(ValueError):
    """A source that cannot be read at all (unknown kind, missing, unusable columns)."""


@dataclass
class SourceItem:
    source: str
    source_kind: str
    path: str | None = None  # a local file holding the bytes
    data: bytes | None = None  # bytes already in memory (archive member, parquet cell)
    url: str | None = None  # to download
    caption: str | None = None
    licence: str | None = None
    style: str | None = None
    artist: str | None = None
    title: str | None = None
    error: tuple[str, str] | None = None  # (reason, message): rejected before decoding
    skipped: str | None = None  # not a candidate at all (metadata file in a folder): counted only

    @property
    def materialise(self) -> bool:
        """Bytes that do not live in a stable local file get copied into the run."""
        return self.path is None


def detect_kind(spec: str) -> tuple[str, Path]:
    """The kind of a source spec and its path; `SourceError` with a clear message otherwise."""
    prefix, sep, rest = spec.partition(":")
    if sep and prefix in SOURCE_KINDS:
        path = Path(rest)
        if not path.exists():
            raise SourceError(f"source not found: {rest}")
        return prefix, path
    if is_url(spec):
        raise SourceError(f"a URL is not a source ({spec}); list URLs in a TSV/CSV or Parquet file")
    path = Path(spec)
    if not path.exists():
        raise SourceError(f"source not found: {spec}")
    if path.is_dir():
        return ("wikiart" if _looks_like_wikiart(path) else "folder"), path
    suffix = path.suffix.lower()
    kinds = {".tsv": "tsv", ".csv": "tsv", ".parquet": "parquet", ".pq": "parquet", ".tar": "webdataset"}
    if suffix in kinds:
        return kinds[suffix], path
    if path.name.lower().endswith((".tar.gz", ".tgz")):
        return "webdataset", path
    raise SourceError(
        f"unknown source kind for {spec}: expected an image folder, a WikiArt root, a .tsv/.csv, "
        f"a .parquet or a WebDataset .tar/.tar.gz (or force a kind with a prefix, e.g. tsv:{spec})"
    )


def _looks_like_wikiart(path: Path) -> bool:
    subdirs = [p.name for p in path.iterdir() if p.is_dir() and not p.name.startswith(".")]
    return bool(subdirs) and all(name in WIKIART_STYLES for name in subdirs)


def iter_source(spec: str, config: IngestConfig) -> Iterator[SourceItem]:
    kind, path = detect_kind(spec)
    readers = {
        "folder": _iter_folder,
        "wikiart": _iter_wikiart,
        "tsv": _iter_table_text,
        "parquet": _iter_parquet,
        "webdataset": _iter_webdataset,
    }
    yield from readers[kind](path, config)


# --- folders ----------------------------------------------------------------------------------


def _walk_files(root: Path, config: IngestConfig, kind: str) -> Iterator[tuple[Path, SourceItem | None]]:
    """Every file under root in sorted order; a non-candidate comes with a ready item."""
    skip_suffixes = {s.lower() for s in config.folder_skip_suffixes}
    for directory, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        base = Path(directory)
        for name in list(dirnames):
            if (base / name).is_symlink():  # not followed: a linked tree may loop back on itself
                dirnames.remove(name)
                message = "symbolic link to a directory is not followed"
                yield base / name, SourceItem(str(base / name), kind, error=(SYMLINKED_DIRECTORY, message))
        for name in sorted(filenames):
            file = (base / name).absolute()
            if name.startswith("."):
                yield file, SourceItem(str(file), kind, skipped="hidden_file")
            elif file.suffix.lower() in skip_suffixes:
                yield file, SourceItem(str(file), kind, skipped="metadata_file")
            else:
                yield file, None


def _iter_folder(root: Path, config: IngestConfig) -> Iterator[SourceItem]:
    for file, ready in _walk_files(root, config, "folder"):
        yield ready or SourceItem(str(file), "folder", path=str(file))


def _iter_wikiart(root: Path, config: IngestConfig) -> Iterator[SourceItem]:
    for file, ready in _walk_files(root, config, "wikiart"):
        if ready:
            yield ready
            continue
        relative = file.relative_to(root.absolute())
        style = relative.parts[0] if len(relative.parts) > 1 else None
        artist, sep, title = file.stem.partition("_")
        yield SourceItem(
            str(file),
            "wikiart",
            path=str(file),
            style=style,
            artist=artist if sep else None,
            title=title if sep else file.stem,
        )


# --- TSV / CSV --------------------------------------------------------------------------------


def _pick(names: list[str], candidates: tuple[str, ...]) -> int | None:
    for candidate in candidates:
        if candidate in names:
            return names.index(candidate)
    return None


def _iter_table_text(path: Path, config: IngestConfig) -> Iterator[SourceItem]:
    is_csv = path.suffix.lower() == ".csv"
    # TSV (CC3M) has no quoting: a caption may start with a quote character and must stay literal.
    dialect = {"delimiter": ","} if is_csv else {"delimiter": "\t", "quoting": csv.QUOTE_NONE}
    with open(path, newline="", encoding="utf-8", errors="replace") as handle:
        rows = _tolerant(csv.reader(handle, **dialect))
        first = next(rows, None)
        if first is None:
            return
        names = [cell.strip().lower() for cell in first] if isinstance(first, list) else []
        url_col = _pick(names, _URL_COLUMNS)
        if url_col is not None:  # header row names the columns
            caption_col, licence_col = _pick(names, _CAPTION_COLUMNS), _pick(names, _LICENCE_COLUMNS)
            start, body = 2, rows
        else:  # CC3M layout: caption <tab> url, no header
            url_col, caption_col, licence_col = 1, 0, None
            start, body = 1, itertools.chain([first], rows)
        for number, row in enumerate(body, start=start):
            if isinstance(row, csv.Error):
                message = f"row {number}: cannot parse: {row}"
                yield SourceItem(f"{path.absolute()}:{number}", "tsv", error=(MALFORMED_ROW, message))
            else:
                yield _row_item(path, number, row, url_col, caption_col, licence_col)


def _tolerant(rows: Iterator[list[str]]) -> Iterator[list[str] | csv.Error]:
    """Rows, with a parse error (e.g. a field over the csv size limit) in place of its row."""
    while True:
        try:
            yield next(rows)
        except StopIteration:
            return
        except csv.Error as error:
            yield error


def _row_item(
    path: Path, line: int, row: list[str], url_col: int, caption_col: int | None, licence_col: int | None
) -> SourceItem:
    where = f"{path.absolute()}:{line}"
    if not row or url_col >= len(row) or not row[url_col].strip():
        message = f"row {line}: expected a url/path in column {url_col + 1}, got {len(row)} column(s)"
        return SourceItem(where, "tsv", error=(MALFORMED_ROW, message))
    target = row[url_col].strip()
    caption = row[caption_col].strip() if caption_col is not None and caption_col < len(row) else None
    licence = row[licence_col].strip() if licence_col is not None and licence_col < len(row) else None
    meta = {"caption": caption or None, "licence": licence or None}
    if is_url(target):
        return SourceItem(target, "tsv", url=target, **meta)
    if target.startswith("file://"):
        target = target[len("file://") :]
    local = Path(target) if Path(target).is_absolute() else path.parent / target
    local = local.absolute()
    return SourceItem(str(local), "tsv", path=str(local), **meta)


# --- Parquet (img2dataset) --------------------------------------------------------------------


def _iter_parquet(path: Path, config: IngestConfig) -> Iterator[SourceItem]:
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except Exception as error:
        raise SourceError(f"cannot read Parquet file {path}: {error}") from None
    names = [n.lower() for n in parquet.schema_arrow.names]
    original = parquet.schema_arrow.names
    bytes_col = next((original[names.index(c)] for c in _BYTES_COLUMNS if c in names), None)
    url_col = next((original[names.index(c)] for c in ("url", "image_url") if c in names), None)
    if bytes_col is None and url_col is None:
        raise SourceError(f"{path}: no image bytes column ({', '.join(_BYTES_COLUMNS)}) and no url column")
    caption_col = next((original[names.index(c)] for c in _CAPTION_COLUMNS if c in names), None)
    licence_col = next((original[names.index(c)] for c in _LICENCE_COLUMNS if c in names), None)
    key_col = original[names.index("key")] if "key" in names else None
    wanted = [c for c in (bytes_col, url_col, caption_col, licence_col, key_col) if c]
    row_index = 0
    for batch in parquet.iter_batches(batch_size=64, columns=wanted):
        for row in batch.to_pylist():
            yield _parquet_item(path, row_index, row, bytes_col, url_col, caption_col, licence_col, key_col)
            row_index += 1


def _parquet_item(path, index, row, bytes_col, url_col, caption_col, licence_col, key_col) -> SourceItem:
    key = row.get(key_col) if key_col else None
    member = f"{path.absolute()}#{key if key not in (None, '') else f'row{index}'}"
    url = row.get(url_col) if url_col else None
    meta = {
        "caption": _text(row.get(caption_col)) if caption_col else None,
        "licence": _text(row.get(licence_col)) if licence_col else None,
    }
    data = row.get(bytes_col) if bytes_col else None
    if isinstance(data, dict):  # Hugging Face Image feature: {"bytes": ..., "path": ...}
        data = data.get("bytes") or data.get("path")
    if isinstance(data, str) and data:  # a file path instead of bytes: relative to the Parquet file
        local = (path.parent / data).absolute()
        return SourceItem(str(local), "parquet", path=str(local), **meta)
    if data:
        return SourceItem(url or member, "parquet", data=bytes(data), **meta)
    if url and is_url(url):
        return SourceItem(url, "parquet", url=url, **meta)
    return SourceItem(
        member, "parquet", error=(MISSING_IMAGE, "row has neither image bytes nor an http(s) url")
    )


def _text(value: object) -> str | None:
    """Metadata as text: numbers etc. become strings, empty values None."""
    if value is None or value == "":
        return None
    return value if isinstance(value, str) else str(value)


# --- WebDataset -------------------------------------------------------------------------------


def _split_member(name: str) -> tuple[str, str]:
    """WebDataset key = path up to the first dot of the file name; the rest is the extension."""
    directory, _, base = name.rpartition("/")
    stem, _, ext = base.partition(".")
    return (f"{directory}/{stem}" if directory else stem), ext.lower()


def _iter_webdataset(path: Path, config: IngestConfig) -> Iterator[SourceItem]:
    group_key: str | None = None
    group: dict[str, bytes] = {}
    try:
        with tarfile.open(path, "r|*") as archive:
            for member in archive:
                key, ext = _split_member(member.name)
                if key != group_key and group:
                    yield _webdataset_item(path, group_key, group)
                    group = {}
                group_key = key
                problem = _member_problem(member, config)
                if problem:
                    yield SourceItem(f"{path.absolute()}::{member.name}", "webdataset", error=problem)
                    continue
                if member.isfile():
                    handle = archive.extractfile(member)
                    group[ext] = handle.read() if handle else b""
    except (tarfile.TarError, OSError, EOFError) as error:
        message = f"archive unreadable after {group_key!r}: {error}"
        yield SourceItem(f"{path.absolute()}", "webdataset", error=(CORRUPT_ARCHIVE, message))
    if group_key is not None and group:
        yield _webdataset_item(path, group_key, group)


def _member_problem(member: tarfile.TarInfo, config: IngestConfig) -> tuple[str, str] | None:
    if member.isdir():
        return None
    if not member.isfile():
        return UNSUPPORTED_MEMBER, f"archive member {member.name} is not a regular file"
    if member.size > config.max_file_bytes:
        return "file_too_large", f"member has {member.size} bytes, limit is {config.max_file_bytes}"
    return None


def _webdataset_item(path: Path, key: str, group: dict[str, bytes]) -> SourceItem:
    source = f"{path.absolute()}::{key}"
    image_ext = next((ext for ext in IMAGE_SUFFIXES if ext in group), None)
    meta: dict = {}
    if "json" in group:
        try:
            info = json.loads(group["json"].decode("utf-8", errors="replace"))
        except ValueError:
            info = {}
        if isinstance(info, dict):
            meta["caption"] = _text(info.get("caption"))
            meta["licence"] = _text(info.get("license") or info.get("licence"))
    if "txt" in group:
        meta["caption"] = group["txt"].decode("utf-8", errors="replace").strip() or meta.get("caption")
    if image_ext is None:
        found = ", ".join(sorted(group)) or "nothing"
        return SourceItem(
            source, "webdataset", error=(MISSING_IMAGE, f"sample has no image member ({found})")
        )
    return SourceItem(f"{source}.{image_ext}", "webdataset", data=group[image_ext], **meta)
