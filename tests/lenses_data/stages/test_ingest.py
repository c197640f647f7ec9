"""Ingest stage over the real sample pool and other source kinds."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image
from skimage import data as skdata

from lenses_app.cli import main as cli_main
from lenses_data.candidates.sources import SourceError
from lenses_data.config import config_from_dict
from lenses_data.io import read_marker, read_rejections, read_stage, stage_is_complete
from lenses_data.stages.base import ColumnMismatch
from lenses_data.stages.ingest import IngestStage, run_ingest


def _manifest(pool: Path) -> dict:
    return json.loads((pool / "sample_manifest.json").read_text())


def _config(**ingest) -> object:
    return config_from_dict({"shard_size": 16, "ingest": ingest}, environ={})


def _jpeg(array, size=(200, 150), **params) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).convert("RGB").resize(size).save(buffer, "JPEG", quality=85, **params)
    return buffer.getvalue()


def test_every_pool_file_gets_its_expected_outcome(sample_pool: Path, ingested_run: Path) -> None:
    accepted = read_stage(ingested_run, "ingest")
    rejections = read_rejections(ingested_run, "ingest")
    by_path = accepted.set_index("path")
    reasons_by_source: dict[str, set[str]] = {}
    for source, reason in zip(rejections["source"], rejections["reason"], strict=True):
        reasons_by_source.setdefault(source, set()).add(reason)
    for entry in _manifest(sample_pool)["files"]:
        path = str((sample_pool / entry["file"]).absolute())
        if entry["expected"] == "accept":
            assert path in by_path.index, entry
            row = by_path.loc[path]
            for key in ("converted_from", "format", "width", "height", "orientation_applied"):
                if key in entry:
                    assert row[key] == entry[key], (entry, key, row[key])
        else:
            reason = entry["expected"].removeprefix("reject:")
            assert path not in by_path.index, entry
            assert reason in reasons_by_source.get(path, set()), (entry, reasons_by_source.get(path))


def test_accepted_rows_describe_the_images(sample_pool: Path, ingested_run: Path) -> None:
    frame = read_stage(ingested_run, "ingest").set_index("path")
    rotated = frame.loc[str(sample_pool / "edge" / "exif_rotated.jpg")]
    stored = Image.open(sample_pool / "edge" / "exif_rotated.jpg").size
    assert (rotated["width"], rotated["height"]) == (stored[1], stored[0]) and rotated["orientation_applied"]
    for path, row in frame.iterrows():
        payload = Path(path).read_bytes()
        assert row["sha256"] == hashlib.sha256(payload).hexdigest() and row["image_id"] == row["sha256"][:16]
        assert row["n_bytes"] == len(payload)
    cmyk = frame.loc[str(sample_pool / "edge" / "cmyk.jpg")]
    assert (cmyk["mode"], cmyk["converted_from"]) == ("CMYK", "CMYK")
    assert frame["image_id"].is_unique and list(frame["image_id"]) == sorted(frame["image_id"])


def test_tsv_rows_and_exact_duplicates(sample_pool: Path, ingested_run: Path) -> None:
    frame = read_stage(ingested_run, "ingest")
    rejections = read_rejections(ingested_run, "ingest")
    tsv_rows = _manifest(sample_pool)["tsv"]["rows"]
    duplicates = rejections[rejections["reason"] == "exact_duplicate"]
    kept_ids = set(frame["image_id"])
    assert set(duplicates["image_id"]) <= kept_ids  # each collapse points at a kept row
    assert (duplicates["record_id"] == duplicates["image_id"]).all()
    for row in tsv_rows:
        reason = row["expected_with_folder"].removeprefix("reject:")
        assert reason in set(rejections["reason"]), row
    # The caption of a TSV row survives on the kept (folder) row of the same bytes.
    astronaut = frame[frame["path"] == str(sample_pool / "originals" / "astronaut.png")].iloc[0]
    assert astronaut["source_kind"] == "folder"
    assert astronaut["source_caption"] == tsv_rows[0]["caption"]


def test_pandas_reads_the_stage_folder_with_typed_columns(ingested_run: Path) -> None:
    marker = read_marker(ingested_run, "ingest")
    assert marker is not None and stage_is_complete(ingested_run, "ingest")
    shards = sorted(p.name for p in (ingested_run / "ingest").glob("part-*.parquet"))
    assert marker["shards"] == shards and len(shards) >= 2  # shard_size 16 < accepted rows
    frame = pd.read_parquet(ingested_run / "ingest")
    assert len(frame) == marker["stats"]["accepted"]
    assert frame["width"].dtype == "int64" and frame["orientation_applied"].dtype == bool
    assert pd.api.types.is_string_dtype(frame["image_id"])


def test_rerun_is_byte_identical(sample_pool: Path, ingested_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(ingested_run, run)
    before = {p.relative_to(run): p.read_bytes() for p in run.rglob("*.parquet")}
    run_ingest([str(sample_pool), str(sample_pool / "cc3m.tsv")], run, _config())
    after = {p.relative_to(run): p.read_bytes() for p in run.rglob("*.parquet")}
    assert before == after
    fresh = tmp_path / "fresh"  # a new run dir, one decode process: same records
    run_ingest([str(sample_pool), str(sample_pool / "cc3m.tsv")], fresh, _config(workers=1))
    assert read_stage(fresh, "ingest").equals(read_stage(ingested_run, "ingest"))
    assert read_rejections(fresh, "ingest").equals(read_rejections(ingested_run, "ingest"))


def test_rerun_with_fewer_shards_removes_stale_ones(sample_pool: Path, tmp_path: Path) -> None:
    run_ingest([str(sample_pool / "originals")], tmp_path, _config())
    assert len(list((tmp_path / "ingest").glob("part-*.parquet"))) == 1
    config = config_from_dict({"shard_size": 5}, environ={})
    run_ingest([str(sample_pool / "originals")], tmp_path, config)
    assert len(list((tmp_path / "ingest").glob("part-*.parquet"))) == 4  # 16 originals / 5
    run_ingest([str(sample_pool / "originals")], tmp_path, _config())
    assert [p.name for p in (tmp_path / "ingest").glob("part-*.parquet")] == ["part-00000.parquet"]
    assert len(pd.read_parquet(tmp_path / "ingest")) == 16


def test_limits_are_configurable(sample_pool: Path, tmp_path: Path) -> None:
    config = _config(min_side=400, max_aspect_ratio=1.2, max_pixels=300_000)
    run_ingest([str(sample_pool / "originals")], tmp_path, config)
    frame = read_stage(tmp_path, "ingest")
    assert (
        (frame["width"] * frame["height"] <= 300_000) & (frame[["width", "height"]].min(axis=1) >= 400)
    ).all()
    reasons = read_rejections(tmp_path, "ingest").set_index("source")["reason"]
    assert reasons[str(sample_pool / "originals" / "retina.jpg")] == "decompression_bomb"  # 1411x1411
    assert reasons[str(sample_pool / "originals" / "clock.png")] == "too_small"  # 400x300
    assert reasons[str(sample_pool / "originals" / "china.jpg")] == "extreme_aspect_ratio"  # 640x427


def test_parquet_and_webdataset_images_are_materialised(tmp_path: Path) -> None:
    photo, other = _jpeg(skdata.coffee()), _jpeg(skdata.rocket())
    pq.write_table(
        pa.table({"key": ["0", "1"], "caption": ["coffee", "broken"], "jpg": [photo, photo[:300]]}),
        tmp_path / "part.parquet",
    )
    with tarfile.open(tmp_path / "shard.tar", "w") as archive:
        for name, payload in (("k1.jpg", other), ("k1.txt", b"a rocket"), ("k2.jpg", photo)):
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            archive.addfile(info, io.BytesIO(payload))
    run = tmp_path / "run"
    run_ingest([str(tmp_path / "part.parquet"), str(tmp_path / "shard.tar")], run, _config())
    frame = read_stage(run, "ingest").set_index("source_kind")
    assert sorted(frame.index) == ["parquet", "webdataset"]
    for row in frame.itertuples():
        assert row.path == str(run / "images" / row.image_id[:2] / f"{row.image_id}.jpg")
        assert hashlib.sha256(Path(row.path).read_bytes()).hexdigest() == row.sha256
    assert frame.loc["webdataset", "source_caption"] == "a rocket"
    reasons = sorted(read_rejections(run, "ingest")["reason"])
    assert reasons == ["exact_duplicate", "truncated_image"]  # k2.jpg repeats the parquet photo
    assert not list((run / "images").rglob(".*.tmp"))


def test_unknown_source_fails_before_any_work(tmp_path: Path) -> None:
    (tmp_path / "data.xlsx").write_bytes(b"x")
    with pytest.raises(SourceError, match="unknown source kind"):
        run_ingest([str(tmp_path / "data.xlsx")], tmp_path / "run", _config())
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files regardless of permissions")
def test_permission_denied_is_unreadable_path(tmp_path: Path) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    locked = folder / "locked.jpg"
    locked.write_bytes(_jpeg(skdata.coffee()))
    locked.chmod(0)
    run_ingest([str(folder)], tmp_path / "run", _config())
    assert list(read_rejections(tmp_path / "run", "ingest")["reason"]) == ["unreadable_path"]


def test_cli_end_to_end_with_config(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pool, run = tmp_path / "S", tmp_path / "R"
    assert cli_main(["sample", "--out", str(pool)]) == 0
    config = tmp_path / "config.yaml"
    config.write_text(
        f"run_dir: {run}\ningest:\n  workers: 2\n  sources: ['{pool}', '{pool / 'cc3m.tsv'}']\n"
    )
    assert cli_main(["ingest", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    rejected = len(read_rejections(run, "ingest"))
    assert f"accepted: {len(pd.read_parquet(run / 'ingest'))}" in out and f"rejected: {rejected}" in out
    assert "truncated_image" in out and "symlink_loop" in out
    assert cli_main(["ingest", "--source", str(tmp_path / "nothing"), "--run", str(run)]) == 2
    assert "source not found" in capsys.readouterr().err


# --- decode helpers (lenses_data.candidates.imaging) -----------------------------------------------------


def test_bomb_headers_refused_before_decoding() -> None:
    from lenses_data.candidates.imaging import DecodeLimits, ImageRejected, inspect_image_bytes
    from lenses_data.candidates.sample import _bomb_png

    limits = DecodeLimits(64, 4.0, 89_478_485, 10**8, ("PNG", "JPEG"))
    # 100 M pixels: only Pillow's warning range; 400 M: Pillow's error range; 1 M: our own limit.
    for (width, height), max_pixels in (
        ((10_000, 10_000), None),
        ((20_000, 20_000), None),
        ((1000, 1000), 999_999),
    ):
        custom = limits if max_pixels is None else DecodeLimits(64, 4.0, max_pixels, 10**8, ("PNG",))
        with pytest.raises(ImageRejected) as caught:
            inspect_image_bytes(_bomb_png(width, height), custom)
        assert caught.value.reason == "decompression_bomb", caught.value.message
    assert Image.MAX_IMAGE_PIXELS == 89_478_485  # the guard restores Pillow's global


def test_load_rgb_applies_the_conversions(sample_pool: Path) -> None:
    import numpy as np

    from lenses_data.candidates.imaging import load_rgb

    rotated = load_rgb(sample_pool / "edge" / "exif_rotated.jpg")
    assert rotated.mode == "RGB" and rotated.size == (660, 550)
    wide = np.asarray(load_rgb(sample_pool / "edge" / "gray16.png"))
    assert 200 < wide.max() < 255 and wide.std() > 10  # scaled from 16 bits, not clipped to white
    palette = Image.open(sample_pool / "edge" / "palette_alpha.png")
    transparent = np.asarray(palette.convert("RGBA"))[..., 3] == 0
    assert transparent.any()
    flattened = np.asarray(load_rgb(sample_pool / "edge" / "palette_alpha.png"))
    assert (flattened[transparent] == 255).all()  # transparency flattened onto white
    assert load_rgb(sample_pool / "edge" / "cmyk.jpg").mode == "RGB"


def test_progress_is_logged_and_wikiart_metadata_is_kept(
    sample_pool: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "wikiart"
    for style, name in (("Impressionism", "claude-monet_the-garden.jpg"), ("Baroque", "rembrandt_self.png")):
        (root / style).mkdir(parents=True)
        source = sample_pool / "originals" / ("coffee.png" if name.endswith("png") else "rocket.jpg")
        shutil.copy(source, root / style / name)
    caplog.set_level("INFO", logger="lenses_data.stages.ingest")
    run_ingest([str(root)], tmp_path / "run", _config(progress_every_n=1))
    frame = read_stage(tmp_path / "run", "ingest").sort_values("style")
    assert list(zip(frame["style"], frame["artist"], frame["title"], strict=True)) == [
        ("Baroque", "rembrandt", "self"),
        ("Impressionism", "claude-monet", "the-garden"),
    ]
    assert set(frame["source_kind"]) == {"wikiart"}
    progress = [r.getMessage() for r in caplog.records if "images/s" in r.getMessage()]
    assert len(progress) == 2 and progress[-1].startswith("ingest: 2 done (2 accepted, 0 rejected)")


def test_ingest_stage_protocol_runs_skips_and_resumes(
    sample_pool: Path, ingested_run: Path, tmp_path: Path
) -> None:
    from lenses_data.candidates.sample import sample_sources
    from lenses_data.stages.base import run_stage
    from lenses_data.stages.registry import build_stage

    run = tmp_path / "run"
    config = config_from_dict(
        {"run_dir": str(run), "shard_size": 16, "ingest": {"sources": sample_sources(sample_pool)}},
        environ={},
    )
    stage = build_stage("ingest", config)
    summary = run_stage(stage, run)
    assert summary["records_out"] == len(read_stage(run, "ingest"))
    assert summary["reasons"]["exact_duplicate"] >= 1
    assert read_stage(run, "ingest").equals(read_stage(ingested_run, "ingest"))
    assert stage.process_shard(run, 0).skipped  # done work is not repeated
    # A crash before the commit point (rejection shard 0, written last) leaves the stage to redo.
    lio_rejection = run / "rejections" / "ingest-part-00000.parquet"
    lio_rejection.unlink()
    (run / "ingest" / "_SUCCESS.json").unlink()
    assert not stage.process_shard(run, 0).skipped
    stage.finish(run, [0], [])
    assert stage_is_complete(run, "ingest")


def _workers_in_child(queue) -> None:
    from lenses_data.stages.ingest_exec import decode_workers

    queue.put(decode_workers(2))


def test_a_daemonic_process_decodes_inline_instead_of_failing():
    """Dask worker processes are daemonic and may not start decode processes of their own."""
    import multiprocessing

    from lenses_data.stages.ingest_exec import decode_workers

    context = multiprocessing.get_context("fork")
    results = []
    for daemon in (True, False):
        queue = context.Queue()
        child = context.Process(target=_workers_in_child, args=(queue,), daemon=daemon)
        child.start()
        results.append(queue.get(timeout=30))
        child.join(timeout=30)
    assert results == [1, 2]
    assert decode_workers(3) == 3


def test_ingest_checks_its_declared_columns(sample_pool: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(IngestStage, "writes", tuple(c for c in IngestStage.writes if c != "phash"))
    with pytest.raises(ColumnMismatch, match=r"stage ingest: output shards .*unexpected \['phash'\]"):
        run_ingest([str(sample_pool / "originals")], tmp_path, _config())
    assert not list((tmp_path / "ingest").glob("part-*.parquet"))
