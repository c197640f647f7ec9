"""The sample pool: real photographs, variants, broken files, TSV and manifest; deterministic."""

from __future__ import annotations

import hashlib
import io
import os
import struct
from pathlib import Path

import pytest
from PIL import Image

from lenses_app.cli import main as cli_main
from lenses_data.candidates.sample import MANIFEST, TSV, build_sample_pool

REQUIRED_BROKEN = {
    "empty_file",
    "truncated_image",
    "not_an_image",
    "too_small",
    "extreme_aspect_ratio",
    "decompression_bomb",
    "symlink_loop",
}
REQUIRED_EDGE_MODES = {"CMYK", "I;16", "P"}


def _digests(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of content (symlinks by their target text)."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink():
            out[path.relative_to(root).as_posix()] = "link:" + os.readlink(path)
        elif path.is_file():
            out[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def test_manifest_lists_every_file_with_a_valid_kind(sample_pool: Path) -> None:
    import json

    manifest = json.loads((sample_pool / MANIFEST).read_text())
    listed = {entry["file"] for entry in manifest["files"]}
    on_disk = set(_digests(sample_pool)) - {MANIFEST, TSV}
    assert listed == on_disk
    originals = {e["file"] for e in manifest["files"] if e["kind"] == "original"}
    for entry in manifest["files"]:
        kind = entry["kind"]
        assert kind in ("original", "edge:accept") or kind.startswith(("variant-of:", "broken:")), kind
        if kind.startswith("variant-of:"):
            assert kind.removeprefix("variant-of:") in originals and entry["transform"]
        if kind.startswith("broken:"):
            assert entry["expected"] == "reject:" + kind.removeprefix("broken:")
    broken = {e["kind"].removeprefix("broken:") for e in manifest["files"] if e["kind"].startswith("broken:")}
    assert REQUIRED_BROKEN <= broken
    edge_modes = {e.get("converted_from") for e in manifest["files"] if e["kind"] == "edge:accept"}
    assert REQUIRED_EDGE_MODES <= edge_modes
    assert any(e.get("orientation_applied") for e in manifest["files"])


def test_originals_are_real_photographs_of_usable_size(sample_pool: Path) -> None:
    originals = sorted((sample_pool / "originals").iterdir())
    assert len(originals) >= 15
    for path in originals:
        with Image.open(path) as image:
            image.load()
            assert min(image.size) >= 150, path
    # The three packages all contribute.
    names = {p.stem for p in originals}
    assert {"astronaut", "china", "flower", "grace_hopper"} <= names


def test_edge_files_are_what_they_claim(sample_pool: Path) -> None:
    png_named = sample_pool / "edge" / "png_named.jpg"
    assert png_named.read_bytes().startswith(b"\x89PNG")
    with Image.open(sample_pool / "edge" / "animated.gif") as gif:
        assert gif.n_frames == 3
    with Image.open(sample_pool / "edge" / "palette_alpha.png") as palette:
        assert palette.mode == "P" and "transparency" in palette.info
    with Image.open(sample_pool / "edge" / "exif_rotated.jpg") as rotated:
        assert rotated.getexif()[0x0112] == 6
    bomb = (sample_pool / "broken" / "bomb.png").read_bytes()  # a header declaring 10^10 pixels
    assert len(bomb) < 100 and struct.unpack(">II", bomb[16:24]) == (100_000, 100_000)
    with pytest.raises(Image.DecompressionBombError):
        Image.open(io.BytesIO(bomb))
    with pytest.raises(OSError):
        (sample_pool / "broken" / "loop_a.jpg").read_bytes()


def test_variants_are_near_not_exact_copies(sample_pool: Path) -> None:
    import numpy as np

    original = Image.open(sample_pool / "originals" / "rocket.jpg").convert("L")
    brighter = Image.open(sample_pool / "variants" / "rocket__brighter.jpg").convert("L")
    assert original.size == brighter.size
    a, b = np.asarray(original, dtype=float), np.asarray(brighter, dtype=float)
    assert np.corrcoef(a.ravel(), b.ravel())[0, 1] > 0.95 and b.mean() > a.mean()
    copy = sample_pool / "variants" / "china__exact_copy.jpg"
    assert copy.read_bytes() == (sample_pool / "originals" / "china.jpg").read_bytes()


def test_tsv_is_cc3m_style_caption_then_url(sample_pool: Path) -> None:
    lines = (sample_pool / TSV).read_text().splitlines()
    full = [line.split("\t") for line in lines if "\t" in line]
    assert len(full) >= 8 and all(len(cells) == 2 for cells in full)
    assert (sample_pool / full[0][1]).is_file()


def test_build_is_deterministic_and_rebuilds_in_place(sample_pool: Path, tmp_path: Path) -> None:
    again = tmp_path / "pool"
    build_sample_pool(again)
    first = _digests(again)
    assert first == _digests(sample_pool)
    (again / "originals" / "astronaut.png").write_bytes(b"tampered")
    build_sample_pool(again)  # an earlier pool is rebuilt, not mixed
    assert _digests(again) == first


def test_refuses_a_foreign_non_empty_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(FileExistsError):
        build_sample_pool(tmp_path)
    assert cli_main(["sample", "--out", str(tmp_path)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def test_truncated_jpeg_really_is_truncated(sample_pool: Path) -> None:
    payload = (sample_pool / "broken" / "truncated.jpg").read_bytes()
    assert payload.startswith(b"\xff\xd8") and not payload.endswith(b"\xff\xd9")
    with pytest.raises(OSError, match="truncated"):
        Image.open(io.BytesIO(payload)).load()
