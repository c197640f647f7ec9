"""Ingest settings: where candidates come from and what counts as a usable image."""

from __future__ import annotations

from pydantic import Field

from lenses_data.config.frozen import FrozenModel


class IngestConfig(FrozenModel):
    sources: tuple[str, ...] = Field(
        (),
        description="Image folders, TSV/CSV, Parquet, .tar shards, WikiArt roots (used when the CLI gives none); "
        "a prefix `folder:`, `tsv:`, `parquet:`, `webdataset:` or `wikiart:` forces the kind",
    )
    min_side: int = Field(64, ge=1, description="Reject images whose shorter side is below this many pixels")
    max_aspect_ratio: float = Field(4.0, ge=1.0, description="Reject images with long/short side above this")
    max_pixels: int = Field(89_478_485, ge=1, description="Decompression-bomb limit, checked before decoding")
    max_file_bytes: int = Field(
        100_000_000, ge=1, description="Refuse local files/archive members larger than this"
    )
    max_download_bytes: int = Field(20_000_000, ge=1, description="Refuse HTTP bodies larger than this")
    download_timeout_s: float = Field(10.0, gt=0, description="Per-URL time budget (connect + whole body)")
    max_redirects: int = Field(
        5, ge=0, description="Redirect hops followed per URL (each hop is host-checked)"
    )
    allow_private_hosts: bool = Field(False, description="Allow URLs resolving to private/loopback addresses")
    user_agent: str = Field("lenses-data-ingest/0.1", description="User-Agent header of downloads")
    allowed_formats: tuple[str, ...] = Field(
        ("JPEG", "PNG", "GIF", "WEBP", "BMP", "TIFF"),
        description="Pillow formats tried when opening a file (content-detected; others are not_an_image; "
        "JPEG includes multi-picture MPO files)",
    )
    folder_skip_suffixes: tuple[str, ...] = Field(
        (".tsv", ".csv", ".json", ".parquet", ".tar", ".md"),
        description="Files in image folders with these suffixes are metadata, not candidates (counted, not read)",
    )
    workers: int = Field(2, ge=1, description="Decode processes (1 = decode in the calling process)")
    download_workers: int = Field(8, ge=1, description="Concurrent downloads (threads)")
    batch_size: int = Field(16, ge=1, description="Images per task sent to a decode process")
    progress_every_n: int = Field(500, ge=1, description="Log progress every N images ...")
    progress_every_s: float = Field(10.0, gt=0, description="... or every this many seconds, whichever first")
