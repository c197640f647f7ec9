"""The export as a Hugging Face dataset: every config loads with `datasets` (offline, from the card's
front matter), lens is a ClassLabel in the paper's order, and an embedded export keeps its images
after the build's files are gone.

The run is real up to ingest (the sample pool copied, so its files can be deleted); the filter,
split and visual_validate outputs are written by hand with the stage record models, so the test
knows exactly which image ends up where.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
import yaml

from lenses_data import io
from lenses_data.config import config_from_dict
from lenses_data.schemas import (
    LENS_NAMES,
    SPLIT_NAMES,
    CandidateImage,
    FilterDecision,
    LensText,
    SplitAssignment,
)
from lenses_data.stages.export import export_dataset

datasets = pytest.importorskip("datasets")

CONFIGS = ("captions", "prompts", "images", "rejections")
LICENSED = ("originals/astronaut.png", "originals/chelsea.png")


def _stage(run: Path, stage: str, rows: list, model) -> None:
    io.write_shard(run, stage, 0, rows, model)
    io.write_rejections(run, stage, 0, [])
    io.mark_stage_complete(run, stage, [0])


def _texts(image_id: str, split: str, k: int) -> list[LensText]:
    """Image k gets texts under its first 1 + k % 5 lenses (so lens counts differ per lens)."""
    rows = []
    for lens in LENS_NAMES[: 1 + k % 5]:
        for kind in ("caption", "prompt"):
            figurative = lens == "Figurative"
            rows.append(
                LensText(
                    text_id=f"{image_id}-{kind}-{lens}",
                    image_id=image_id,
                    kind=kind,
                    lens=lens,
                    text=f"A {lens.lower()} {kind} about image {k}, built like a house of cards.",
                    focus=f"object {k}",
                    idioms=["house of cards"] if figurative else [],
                    prompt_name=f"{kind}s",
                    prompt_hash="h",
                    model="test-generator",
                    simulated=True,
                    edited=k % 2 == 0,
                    original_text=f"draft {k}",
                    split=split,
                    flags=["figurative_missing_idiom"] if lens == "Abstract" else [],
                )
            )
    return rows


def build_run(pool: Path, root: Path) -> Path:
    """Copy the pool under `root`, ingest it (plus a TSV that gives two files a licence), then
    write filter/split/visual_validate by hand: image 0 fails the filter, the last gets no texts."""
    from lenses_data.candidates.sample import sample_sources
    from lenses_data.stages.ingest import run_ingest

    own_pool, run = root / "pool", root / "run"
    shutil.copytree(pool, own_pool, symlinks=True)
    licensed = root / "licensed.tsv"
    lines = ["url\tcaption\tlicense"] + [f"{own_pool / name}\tx\tCC BY 4.0" for name in LICENSED]
    licensed.write_text("\n".join(lines) + "\n")
    run_ingest([*sample_sources(own_pool), str(licensed)], run, config_from_dict({}, environ={}))
    ids = sorted(io.read_stage(run, "ingest", CandidateImage)["image_id"].unique())
    decisions = [
        FilterDecision(
            image_id=i,
            decision="NO" if k == 0 else "YES",
            passed=k != 0,
            raw="",
            model="f",
            prompt_hash="h",
            simulated=True,
        )
        for k, i in enumerate(ids)
    ]
    _stage(run, "filter", decisions, FilterDecision)
    passed = ids[1:]
    splits = {i: SPLIT_NAMES[k % 3] for k, i in enumerate(passed)}
    _stage(
        run,
        "split",
        [SplitAssignment(image_id=i, group_id=i, split=s) for i, s in splits.items()],
        SplitAssignment,
    )
    texts = [t for k, i in enumerate(passed[:-1]) for t in _texts(i, splits[i], k)]
    _stage(run, "visual_validate", texts, LensText)
    return run


@pytest.fixture(scope="module")
def run_dir(sample_pool: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_run(sample_pool, tmp_path_factory.mktemp("hf_run"))


@pytest.fixture(scope="module")
def export(run_dir: Path) -> Path:
    out = run_dir.parent / "export"
    export_dataset(run_dir, out, config_from_dict({}, environ={}))
    return out


def _load(path: Path, config: str, cache: Path, **kwargs):
    return datasets.load_dataset(str(path), config, cache_dir=str(cache), **kwargs)


def _front_matter(export: Path) -> dict:
    text = (export / "README.md").read_text()
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def test_every_config_loads_with_the_rows_pandas_reads(export: Path, tmp_path: Path):
    for name in CONFIGS:
        loaded = _load(export, name, tmp_path / name)
        flat = pd.read_parquet(export / f"{name}.parquet")
        if name == "rejections":
            assert {k: len(v) for k, v in loaded.items()} == {"full": len(flat)}
            assert len(flat) > 0
            continue
        expected = flat["split"].value_counts().to_dict()
        assert {k: len(v) for k, v in loaded.items()} == {s: expected.get(s, 0) for s in SPLIT_NAMES}
        for split, part in loaded.items():
            assert sorted(part["image_id"]) == sorted(flat.loc[flat["split"] == split, "image_id"])


def test_default_config_is_captions(export: Path, tmp_path: Path):
    loaded = _load(export, None, tmp_path)
    captions = pd.read_parquet(export / "captions.parquet")
    assert sum(len(v) for v in loaded.values()) == len(captions)
    assert set(loaded["train"]["text_id"]) == set(captions.loc[captions["split"] == "train", "text_id"])


def test_lens_is_a_class_label_and_other_columns_keep_their_types(export: Path, tmp_path: Path):
    flat = pd.read_parquet(export / "prompts.parquet").set_index("text_id")
    loaded = _load(export, "prompts", tmp_path)
    feats = loaded["train"].features
    assert isinstance(feats["lens"], datasets.ClassLabel) and feats["lens"].names == list(LENS_NAMES)
    assert isinstance(feats["split"], datasets.ClassLabel) and feats["split"].names == list(SPLIT_NAMES)
    assert feats["edited"].dtype == "bool" and feats["focus"].dtype == "string"
    for split, part in loaded.items():
        for row in part:
            want = flat.loc[row["text_id"]]
            assert feats["lens"].int2str(row["lens"]) == want["lens"]
            assert feats["split"].int2str(row["split"]) == split == want["split"]
            assert row["idioms"] == list(want["idioms"]) and row["flags"] == list(want["flags"])
            assert row["focus"] == want["focus"] and row["edited"] == bool(want["edited"])
    # every lens occurs, so a wrong code mapping could not hide behind a missing class
    assert set(flat["lens"]) == set(LENS_NAMES)


def test_pandas_still_reads_categoricals(export: Path):
    for name in ("captions", "prompts", "images"):
        frame = pd.read_parquet(export / f"{name}.parquet")
        assert list(frame["split"].cat.categories) == list(SPLIT_NAMES)
        if name != "images":
            assert list(frame["lens"].cat.categories) == list(LENS_NAMES)


def test_card_metadata_block(export: Path, run_dir: Path):
    meta = _front_matter(export)
    assert [c["config_name"] for c in meta["configs"]] == list(CONFIGS)
    assert [c["config_name"] for c in meta["configs"] if c.get("default")] == ["captions"]
    images = pd.read_parquet(export / "images.parquet")
    licensed = sum(images["path"].str.endswith(LICENSED))
    assert 0 < licensed < len(images)  # so the licence field must be the mixed form
    assert meta["license"] == "other"
    assert f"CC BY 4.0 ({licensed:,} images)" in meta["license_details"]
    assert f"unspecified ({len(images) - licensed:,} images)" in meta["license_details"]
    assert meta["language"] == ["en"] and meta["size_categories"] == ["n<1K"]
    assert meta["task_categories"] and meta["pretty_name"].startswith("Lenses")
    body = (export / "README.md").read_text()
    assert "## Licences" in body and "## Loading" in body and "## Rule flags on kept texts" in body


def _build_embedded(sample_pool: Path, root: Path, shard_mb: float) -> tuple[Path, pd.DataFrame]:
    run = build_run(sample_pool, root)
    out = root / "export"
    config = config_from_dict({"export": {"embed_images": True, "shard_mb": shard_mb}}, environ={})
    export_dataset(run, out, config)
    return out, pd.read_parquet(out / "images.parquet")


def test_embedded_export_opens_its_images_after_the_originals_are_gone(sample_pool: Path, tmp_path: Path):
    out, images = _build_embedded(sample_pool, tmp_path / "build", shard_mb=0.3)
    # small shards: the train split spans several files, named -of-N
    train_files = sorted((out / "hf" / "images").glob("train-*.parquet"))
    assert len(train_files) > 1 and all(
        f.name.endswith(f"-of-{len(train_files):05d}.parquet") for f in train_files
    )

    moved = tmp_path / "elsewhere" / "lenses"
    shutil.copytree(out, moved)
    shutil.rmtree(tmp_path / "build")  # the pool copy, the run and the export: every original is gone
    assert not any(Path(p).exists() for p in images["path"])

    loaded = _load(moved, "images", tmp_path / "cache")
    assert {k: len(v) for k, v in loaded.items()} == images["split"].value_counts().reindex(
        SPLIT_NAMES
    ).to_dict()
    assert isinstance(loaded["train"].features["image"], datasets.Image)
    by_id = images.set_index("image_id")
    row = loaded["test"][0]
    picture = row["image"]  # decoded by `datasets` from the embedded bytes
    assert picture.size == (by_id.loc[row["image_id"], "width"], by_id.loc[row["image_id"], "height"])
    assert picture.convert("RGB").getextrema() != ((0, 0), (0, 0), (0, 0))
    # the bytes are the original files: their sha256 is the image id
    raw = loaded["train"].cast_column("image", datasets.Image(decode=False))
    for item in raw:
        assert hashlib.sha256(item["image"]["bytes"]).hexdigest()[:16] == item["image_id"]


def test_reexport_leaves_no_stale_shards(sample_pool: Path, tmp_path: Path):
    out, images = _build_embedded(sample_pool, tmp_path, shard_mb=0.3)
    assert len(list((out / "hf" / "images").glob("train-*"))) > 1
    export_dataset(tmp_path / "run", out, config_from_dict({}, environ={}))  # paths only, one shard each
    assert sorted(p.name for p in (out / "hf" / "images").iterdir()) == [
        f"{s}-00000-of-00001.parquet" for s in sorted(SPLIT_NAMES)
    ]
    loaded = _load(out, "images", tmp_path / "cache")
    assert "image" not in loaded["train"].features
    assert sum(len(v) for v in loaded.values()) == len(images)


def test_card_features_are_what_datasets_itself_writes(export: Path):
    """Our YAML features, parsed by `datasets` and written back by it, come out unchanged."""
    for info in _front_matter(export)["dataset_info"]:
        parsed = datasets.Features._from_yaml_list(info["features"])
        assert parsed._to_yaml_list() == info["features"]


def test_embedded_jpegs_are_resized_to_the_longer_side(tmp_path: Path):
    from PIL import Image

    from lenses_data.ids import image_id_from_bytes
    from lenses_data.stages.export_hf import ImageGone, embedded_cell

    source = tmp_path / "wide.png"
    Image.effect_noise((1200, 800), 40).convert("RGB").save(source)
    wide = image_id_from_bytes(source.read_bytes())
    cell = embedded_cell(str(source), wide, max_side=512, quality=85)
    assert cell["path"] == f"{wide}.jpg" and cell["bytes"][:3] == b"\xff\xd8\xff"  # a JPEG
    assert datasets.Image().decode_example(cell).size == (512, 341)
    small = tmp_path / "small.png"
    Image.effect_noise((300, 200), 40).convert("RGB").save(small)
    small_id = image_id_from_bytes(small.read_bytes())
    assert datasets.Image().decode_example(embedded_cell(str(small), small_id, 512, 85)).size == (300, 200)
    # the file ingest saw must still be there, with the same bytes
    with pytest.raises(ImageGone, match="changed since ingest"):
        embedded_cell(str(small), wide, None, 90)
    with pytest.raises(ImageGone, match="no longer exists"):
        embedded_cell(str(tmp_path / "gone.png"), wide, None, 90)


def test_cli_embed_flags(run_dir: Path, tmp_path: Path, capsys):
    from lenses_app.cli import main

    out = tmp_path / "cli_export"
    assert main(["export", "--run", str(run_dir), "--out", str(out), "--embed-max-side", "64"]) == 0
    loaded = _load(out, "images", tmp_path / "cache")
    assert max(loaded["train"][0]["image"].size) <= 64
    assert main(["export", "--run", str(run_dir), "--out", str(out), "--embed-max-side", "8"]) == 2
    assert "--embed-max-side" in capsys.readouterr().err


def test_duckdb_reads_the_flat_tables_with_lens_names(export: Path, monkeypatch):
    """The README's SQL line, run where it says: lens names (not codes) and pandas' counts."""
    duckdb = pytest.importorskip("duckdb")
    monkeypatch.chdir(export.parent)
    rows = duckdb.sql("SELECT lens, count(*) FROM 'export/captions.parquet' GROUP BY lens").fetchall()
    counts = pd.read_parquet(export / "captions.parquet")["lens"].value_counts()
    assert dict(rows) == {lens: int(n) for lens, n in counts.items() if n}
    assert set(dict(rows)) == set(LENS_NAMES)


def test_export_leaves_the_process_arrow_allocator_alone(sample_pool: Path, tmp_path: Path):
    """Library code sets no process-wide state: the allocator is the entry point's choice (cli.py)."""
    run = build_run(sample_pool, tmp_path)
    before = pa.default_memory_pool().backend_name
    export_dataset(run, tmp_path / "export", config_from_dict({}, environ={}))
    assert pa.default_memory_pool().backend_name == before
