"""Dedupe stage on the real sample pool: planted variants join their original, distinct photos never merge."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lenses_app.cli import main
from lenses_data import io
from lenses_data.config import config_from_dict
from lenses_data.dedupe.pairs import read_pairs
from lenses_data.schemas import CandidateImage, DedupePair, DedupeRecord
from lenses_data.stages.base import run_stage
from lenses_data.stages.dedupe import DedupeStage, format_summary, read_summary

TINY_CLIP = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
    "text_cfg": {"context_length": 16, "vocab_size": 64, "width": 32, "heads": 2, "layers": 1},
}


def fresh_run(ingested_run: Path, tmp_path: Path, name: str = "run") -> Path:
    """A writable run holding a copy of the session's ingest output (the fixture is read-only)."""
    run = tmp_path / name
    shutil.copytree(ingested_run / "ingest", run / "ingest")
    return run


def dedupe(run: Path, **settings) -> pd.DataFrame:
    config = config_from_dict({"run_dir": str(run), "dedupe": settings}, environ={})
    run_stage(DedupeStage(config), run)
    return io.read_stage(run, "dedupe", DedupeRecord)


def pool_groups(sample_pool: Path, run: Path) -> tuple[pd.DataFrame, dict[str, str]]:
    """Ingested images with their manifest photo (`group`) and the variant -> original file map."""
    manifest = json.loads((sample_pool / "sample_manifest.json").read_text())
    accepted = [f for f in manifest["files"] if f["expected"] == "accept"]
    by_path = {str((sample_pool / f["file"]).resolve()): f for f in accepted}
    images = io.read_stage(run, "ingest", CandidateImage)
    images["file"] = [by_path[str(Path(p).resolve())]["file"] for p in images["path"]]
    images["photo"] = [by_path[str(Path(p).resolve())].get("group") for p in images["path"]]
    variants = {
        f["file"]: f["kind"].split(":", 1)[1]
        for f in manifest["files"]
        if f["kind"].startswith("variant-of:")
    }
    return images, variants


def assert_no_distinct_photos_merged(records: pd.DataFrame, images: pd.DataFrame) -> None:
    merged = records.merge(images[["image_id", "photo"]], on="image_id")
    photos_per_group = merged.groupby("group_id")["photo"].nunique()
    assert (photos_per_group == 1).all(), photos_per_group[photos_per_group > 1]


def test_pool_separating_radius_groups_every_planted_variant(sample_pool, ingested_run, tmp_path) -> None:
    """At the radius the calibration finds separating on the pool (16), every variant joins its original."""
    from lenses_data.dedupe.calibrate import calibrate

    radius = calibrate(sample_pool)["pool_separating_radius"]
    assert radius is not None
    run = fresh_run(ingested_run, tmp_path)
    records = dedupe(run, hamming_radius=radius)
    images, variants = pool_groups(sample_pool, run)
    group_of = dict(zip(records["image_id"], records["group_id"], strict=True))
    id_of = dict(zip(images["file"], images["image_id"], strict=True))
    present = {v: o for v, o in variants.items() if v in id_of}  # the exact byte copy collapsed at ingest
    assert len(present) >= 8
    for variant, original in present.items():
        assert group_of[id_of[variant]] == group_of[id_of[original]], variant
    assert_no_distinct_photos_merged(records, images)
    assert records["kept"].sum() == images["photo"].nunique()


def test_default_radius_removes_photometric_variants_and_records_why(
    sample_pool, ingested_run, tmp_path
) -> None:
    run = fresh_run(ingested_run, tmp_path)
    records = dedupe(run)
    images, variants = pool_groups(sample_pool, run)
    assert_no_distinct_photos_merged(records, images)
    removed = records[~records["kept"]].merge(images[["image_id", "file", "width", "height"]], on="image_id")
    assert set(removed["file"]) <= set(variants)
    # resizes, re-encodes and brightness shifts are caught by the calibrated radius (8 bits)
    assert {
        "variants/astronaut__resize50.jpg",
        "variants/chelsea__jpeg_q30.jpg",
        "variants/rocket__brighter.jpg",
    } <= set(removed["file"])
    photometric = removed[~removed["file"].str.contains("crop")]
    assert photometric["signal"].eq("phash").all() and (photometric["distance"] <= 8).all()
    # the two border crops (whole-image pHash 14 and 16 bits away) are caught without CLIP
    # weights: aligned centre-crop hashes, confirmed by dHash
    crops = removed[removed["file"].str.contains("crop")].set_index("file")
    assert set(crops.index) == {"variants/coffee__crop90.jpg", "variants/flower__crop85.jpg"}
    assert crops["signal"].eq("phash_crop").all() and (crops["distance"] <= 8).all()
    # the survivor is the larger copy: every original beat its downscaled variant
    size = dict(zip(images["image_id"], images["width"] * images["height"], strict=True))
    assert all(size[s] >= size[r] for r, s in zip(removed["image_id"], removed["duplicate_of"], strict=True))
    # every removed image is a rejection naming its survivor: the funnel accounts for all
    rejections = io.read_rejections(run, "dedupe")
    assert set(rejections["record_id"]) == set(removed["image_id"])
    reasons = dict(zip(rejections["record_id"], rejections["reason"], strict=True))
    for rec in removed.itertuples():
        assert reasons[rec.image_id] == (
            "near_duplicate_crop" if "crop" in rec.file else "near_duplicate_phash"
        )
    for rec in rejections.itertuples():
        assert records.set_index("image_id").loc[rec.record_id, "duplicate_of"] in rec.message
    assert len(records) == len(images)
    summary = read_summary(run)
    assert summary["clip_signal"] == "off" and summary["thresholds"]["hamming_radius"] == 8
    assert summary["removed"] == len(removed) and summary["removed_by_signal"]["phash"] == len(photometric)
    assert summary["removed_by_signal"]["phash_crop"] == 2 and summary["crop_signal"]["confirmed"] >= 2


def test_rerun_gives_identical_groups_and_survivors(ingested_run, tmp_path) -> None:
    first = dedupe(fresh_run(ingested_run, tmp_path, "a"), hamming_radius=16)
    second_run = fresh_run(ingested_run, tmp_path, "b")
    # shuffle the shard contents: row order must not matter
    ingest = io.read_stage(second_run, "ingest", CandidateImage).sample(frac=1.0, random_state=3)
    shutil.rmtree(second_run / "ingest")
    io.write_shard(second_run, "ingest", 0, ingest, CandidateImage)
    io.mark_stage_complete(second_run, "ingest", [0])
    second = dedupe(second_run, hamming_radius=16)
    pd.testing.assert_frame_equal(first, second)
    assert pd.Series(first["phash"]).dtype == np.int64


def test_old_run_without_stored_hashes_is_hashed_on_demand_with_the_same_result(
    ingested_run, tmp_path
) -> None:
    """A run ingested before hashes were stored: its shards lack the columns; dedupe hashes the
    files itself, the same way ingest does, and reaches the same groups."""
    import pyarrow.parquet as pq

    new = dedupe(fresh_run(ingested_run, tmp_path, "new"))
    old_run = fresh_run(ingested_run, tmp_path, "old")
    for shard in (old_run / "ingest").glob("part-*.parquet"):
        table = pq.read_table(shard)
        pq.write_table(table.drop_columns(["phash", "phash_crops", "dhashes", "hash_version"]), shard)
    assert "phash" not in pq.read_schema(next((old_run / "ingest").glob("part-*.parquet"))).names
    old = dedupe(old_run)
    pd.testing.assert_frame_equal(new, old)
    assert (~new["kept"]).sum() >= 7


def test_stored_hash_is_imagehash_of_the_decoded_view(sample_pool, ingested_run) -> None:
    """Ingest's pHash is `imagehash.phash` of the image it decoded (JPEG draft at the DCT scale
    that keeps >= 64 px, then reduced by the integer factor that still keeps >= 64 px, upright,
    RGB); versus a full-size decode it differs by a few bits at most."""
    import imagehash
    from PIL import Image, ImageOps

    from lenses_data.candidates.view_hash import view_scale
    from lenses_data.dedupe.hash_index import hamming
    from lenses_data.dedupe.hashing import bits_to_int64

    images = io.read_stage(ingested_run, "ingest", CandidateImage)
    jpegs = images[(images["format"] == "JPEG") & ~images["orientation_applied"] & (images["mode"] == "RGB")]
    assert len(jpegs) >= 5
    full_diff = []
    for row in jpegs.itertuples():
        with Image.open(row.path) as image:
            scale = view_scale(*image.size)
            image.draft("L", (image.width // scale, image.height // scale))
            view = image.convert("RGB")
        view = view.reduce(view_scale(*view.size))  # past the draft's 1/8 limit (large photos)
        assert bits_to_int64(imagehash.phash(view).hash) == row.phash, row.path
        full = ImageOps.exif_transpose(Image.open(row.path).convert("RGB"))
        full_diff.append(
            int(hamming(np.array([row.phash]), np.array([bits_to_int64(imagehash.phash(full).hash)]))[0])
        )
    assert max(full_diff) <= 6, full_diff


def test_greyscale_jpeg_is_hashed_as_imagehash_of_its_rgb_view() -> None:
    """A greyscale JPEG is hashed without the RGB copy the view would be: the codes are still
    `imagehash.phash` of that RGB view, and the same as for its RGB-converted bytes' view."""
    import io as pyio

    import imagehash
    from PIL import Image
    from skimage import data

    from lenses_data.candidates.imaging import DecodeLimits, inspect_image_bytes
    from lenses_data.candidates.view_hash import view_codes, view_scale
    from lenses_data.dedupe.hashing import bits_to_int64

    limits = DecodeLimits(1, 100.0, 10**8, 10**8, ("JPEG",))
    buffer = pyio.BytesIO()
    Image.fromarray(data.camera()).save(buffer, "JPEG", quality=90)  # 512x512, mode L
    facts = inspect_image_bytes(buffer.getvalue(), limits)
    with Image.open(pyio.BytesIO(buffer.getvalue())) as image:
        assert image.mode == "L" and facts.converted_from == "L"
        scale = view_scale(*image.size)
        image.draft("L", (image.width // scale, image.height // scale))
        view = image.convert("RGB")
    assert view.size == (64, 64)
    assert facts.codes["phash"] == bits_to_int64(imagehash.phash(view).hash)
    assert facts.codes == view_codes(view).as_dict()


def test_unreadable_image_is_a_rejection_not_a_failed_run(ingested_run, tmp_path) -> None:
    """Dedupe reads stored hashes; a row without them (older ingest) is hashed from its file,
    and a file that cannot be read then is a rejection."""
    run = fresh_run(ingested_run, tmp_path)
    ingest = io.read_stage(run, "ingest", CandidateImage)
    victim = ingest.iloc[0]
    broken = tmp_path / "vanished.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    ingest.loc[0, "path"] = str(broken)
    ingest.loc[0, "hash_version"] = None
    shutil.rmtree(run / "ingest")
    io.write_shard(run, "ingest", 0, ingest, CandidateImage)
    io.mark_stage_complete(run, "ingest", [0])
    records = dedupe(run)
    rejections = io.read_rejections(run, "dedupe").set_index("record_id")
    assert victim["image_id"] not in set(records["image_id"])
    assert rejections.loc[victim["image_id"], "reason"] == "hash_failed"
    assert len(records) + (rejections["reason"] == "hash_failed").sum() == len(ingest)


def test_a_row_without_hashes_leaves_the_other_hashes_exact(ingested_run, tmp_path) -> None:
    """One image whose hashing failed at ingest (null hash columns) must not turn the int64 hash
    column into floats: every other image keeps its stored 64-bit hash bit for bit."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    run = fresh_run(ingested_run, tmp_path)
    shards = sorted((run / "ingest").glob("part-*.parquet"))
    table = pq.read_table(shards[0])
    stored = dict(zip(table.column("image_id").to_pylist(), table.column("phash").to_pylist(), strict=True))
    assert any(abs(v) > 2**53 for v in stored.values())  # low bits a float64 would lose
    victim = table.column("image_id")[0].as_py()
    for name in ("phash", "phash_crops", "dhashes", "hash_version"):
        index = table.schema.get_field_index(name)
        column = table.column(name).to_pylist()
        column[0] = None
        field = table.schema.field(index)
        table = table.set_column(index, field, pa.array(column, field.type))
    pq.write_table(table, shards[0])
    records = dedupe(run).set_index("image_id")["phash"]
    for image_id, value in stored.items():
        if image_id != victim:
            assert records[image_id] == value, image_id
    assert records[victim] == stored[victim]  # hashed on demand from its file, the way ingest does


def test_clip_mechanics_with_random_weights(ingested_run, tmp_path) -> None:
    config_file = tmp_path / "lenses-tiny-clip.json"
    config_file.write_text(json.dumps(TINY_CLIP))
    run = fresh_run(ingested_run, tmp_path)
    records = dedupe(
        run, clip_model="lenses-tiny-clip", clip_model_config=str(config_file), clip_random_weights=True,
        clip_device="cpu", clip_threshold=0.999, leakage_threshold=0.99, n_clusters=3,
    )  # fmt: skip
    summary = read_summary(run)
    assert summary["clip_signal"] == "random-weights"
    embed = summary["clip_embed"]  # the network and how it ran, with the reason for the activation
    assert (embed["activation"], embed["precision"], embed["batch_size"]) == ("GELU", "fp32", 64)
    assert "no sign of OpenAI weights" in embed["activation_reason"]
    assert "CLIP network: GELU" in format_summary(summary)
    emb = np.load(run / "dedupe" / "embeddings.npy")
    ids = np.load(run / "dedupe" / "embedding_ids.npy")
    assert emb.dtype == np.float16 and emb.shape == (len(records), 32)
    assert ids.tolist() == records["image_id"].tolist()
    assert np.allclose(np.linalg.norm(emb.astype(np.float32), axis=1), 1.0, atol=2e-3)
    assert records["cluster_id"].notna().all() and records["cluster_id"].nunique() > 1
    pairs = read_pairs(run)
    row = {i: k for k, i in enumerate(ids)}
    for pair in pairs[pairs["signal"].isin(["clip", "both"])].itertuples():
        cosine = float(emb[row[pair.image_a]].astype(np.float32) @ emb[row[pair.image_b]].astype(np.float32))
        assert abs(cosine - pair.cosine) < 1e-5 and cosine >= 0.99
    io.read_parquet_files([run / "dedupe" / "pairs.parquet"], DedupePair)  # schema-valid


def test_cli_dedupe_and_calibrate(sample_pool, ingested_run, tmp_path, capsys, monkeypatch) -> None:
    run = fresh_run(ingested_run, tmp_path)
    assert main(["dedupe", "--run", str(run)]) == 0
    out = capsys.readouterr().out
    assert "CLIP signal: OFF" in out and "radius 8" in out
    assert "aligned radius 8)" in out and "confirmed by dHash (radius 14)" in out  # the crop radii
    assert (
        read_summary(run)["thresholds"] | {"crop_radius": 8, "crop_confirm_radius": 14}
        == read_summary(run)["thresholds"]
    )
    assert main(["dedupe", "--calibrate", str(sample_pool)]) == 0
    assert "recommended radius: 8" in capsys.readouterr().out
    monkeypatch.setenv("LENSES__DEDUPE__CLIP_THRESHOLD", "1.7")
    assert main(["dedupe", "--run", str(run)]) == 2
    assert "dedupe.clip_threshold" in capsys.readouterr().err


def test_missing_ingest_is_a_clear_error(tmp_path, capsys) -> None:
    assert main(["dedupe", "--run", str(tmp_path / "empty")]) == 2
    assert "ingest" in capsys.readouterr().err
    with pytest.raises(io.StageIncompleteError):
        DedupeStage(config_from_dict({}, environ={})).input_shards(tmp_path / "empty")


def test_paper_order_dedupes_only_filter_passed_images(ingested_run, tmp_path) -> None:
    """With dedupe_before_filter false, dedupe reads the filter's YES images only."""
    from lenses_data.schemas import FilterDecision

    run = fresh_run(ingested_run, tmp_path)
    ingest = io.read_stage(run, "ingest", CandidateImage)
    passed = set(ingest["image_id"][::2])
    decisions = [
        {"image_id": i, "decision": "YES" if i in passed else "NO", "passed": i in passed, "raw": "",
         "model": "m", "prompt_hash": "h", "simulated": True}
        for i in ingest["image_id"]
    ]  # fmt: skip
    io.write_shard(run, "filter", 0, pd.DataFrame(decisions), FilterDecision)
    io.mark_stage_complete(run, "filter", [0])
    config = config_from_dict({"run_dir": str(run), "dedupe_before_filter": False}, environ={})
    run_stage(DedupeStage(config), run)
    assert set(io.read_stage(run, "dedupe", DedupeRecord)["image_id"]) == passed


def test_multi_index_and_flat_search_give_the_same_groups(ingested_run, tmp_path) -> None:
    flat = dedupe(fresh_run(ingested_run, tmp_path, "flat"), hamming_radius=16)
    run = fresh_run(ingested_run, tmp_path, "mih")
    indexed = dedupe(run, hamming_radius=16, hash_flat_max=0)
    assert read_summary(run)["hash_index"]["method"] == "multi_index"
    pd.testing.assert_frame_equal(flat, indexed)
