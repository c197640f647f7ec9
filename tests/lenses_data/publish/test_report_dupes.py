"""The report's near-duplicate groups on real dedupe output of the sample pool (its planted variants):
which groups are chosen and in what order, and that every removed image names the signal that
merged it, its distance and the threshold; pHash, crop and CLIP removals on one page."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from lenses_data import io
from lenses_data.config import config_from_dict
from lenses_data.dedupe.pairs import read_pairs
from lenses_data.publish.report import dupes_page
from lenses_data.publish.report.dupes import LABEL, choose_groups, closeness, dedupe_view
from lenses_data.publish.report.thumbs import make_thumbnails
from lenses_data.schemas import DedupeRecord
from lenses_data.stages.base import run_stage
from lenses_data.stages.dedupe import DedupeStage

TINY_CLIP = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
    "text_cfg": {"context_length": 16, "vocab_size": 64, "width": 32, "heads": 2, "layers": 1},
}


def _dedupe(ingested_run: Path, run: Path, **settings) -> pd.DataFrame:
    """Dedupe a copy of the session's ingested sample pool; its removed records."""
    shutil.copytree(ingested_run / "ingest", run / "ingest")
    config = config_from_dict({"run_dir": str(run), "dedupe": settings}, environ={})
    run_stage(DedupeStage(config), run)
    records = io.read_stage(run, "dedupe", DedupeRecord)
    return records[~records["kept"]].set_index("image_id")


def _evidence_lines(html: str) -> dict[str, tuple[str, str]]:
    """image id -> (data-signal, evidence text) of every removed figure on the page."""
    import re

    found = re.findall(
        r'<figure class="dropped[^"]*" data-signal="([^"]*)" data-distance="[^"]*">.*?<code>([0-9a-f]{16})</code>'
        r'<br><span class="evidence">([^<]*)</span>',
        html,
    )
    return {image_id: (signal, text) for signal, image_id, text in found}


@pytest.fixture(scope="module")
def hashed_run(ingested_run: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    run = tmp_path_factory.mktemp("dupes") / "run"
    return run, _dedupe(ingested_run, run)


def test_crop_pairs_persist_their_aligned_distance(hashed_run) -> None:
    run, removed = hashed_run
    pairs = read_pairs(run)
    crop = removed[removed["signal"] == "phash_crop"]
    assert len(crop) >= 2  # the pool's crop90 and crop85 variants
    for image_id, rec in crop.iterrows():
        pair = pairs[(pairs[["image_a", "image_b"]].isin([image_id, rec["linked_via"]])).all(axis=1)]
        assert len(pair) == 1 and pair["aligned"].iloc[0] == rec["distance"]
        assert pair["hamming"].iloc[0] > 8  # the whole-image hash alone would not have merged it
    assert (pairs["aligned"].dropna() <= 8).all()  # only pairs the crop signal confirmed have one


def test_every_removed_image_names_signal_distance_and_threshold(hashed_run, tmp_path) -> None:
    run, removed = hashed_run
    view = dedupe_view(run, limit=24)
    assert view.total == removed["group_id"].nunique() == len(view.groups)  # all 8 fit in 24
    assert view.removed_by_signal["phash"] + view.removed_by_signal["phash_crop"] == len(removed)
    images = io.read_stage(run, "ingest")
    thumbs = make_thumbnails(dict(zip(images["image_id"], images["path"], strict=True)), tmp_path)
    html = dupes_page.section_html(view, thumbs)
    shown = _evidence_lines(html)
    assert set(shown) == set(removed.index)
    for image_id, rec in removed.iterrows():
        signal, text = shown[image_id]
        assert signal == rec["signal"]
        unit = "aligned bits" if rec["signal"] == "phash_crop" else "bits"
        assert text.startswith(
            f"{LABEL[rec['signal']]}: distance {int(rec['distance'])} {unit}, threshold ≤ 8 bits"
        )
    # the kept image beside the removed one, both as thumbnails that exist
    for group in view.groups:
        kept = [m["image_id"] for m in group["members"] if m["kept"]]
        assert kept == [group["group_id"]] and f'src="thumbs/{kept[0]}.webp"' in html
    assert all(f'src="thumbs/{i}.webp"' in html for i in removed.index)
    assert "crop (aligned centre-crop pHashes) ≤ 8 bits, confirmed by dHash ≤ 14" in html


def test_choice_takes_each_signal_nearest_its_threshold_in_turn(hashed_run) -> None:
    """Limit 3 of 8 groups (all of two images, no CLIP): the pHash removal nearest its threshold, the
    crop removal nearest its own, then the next pHash one; ties to the lower group id."""
    run, removed = hashed_run
    t = {"hamming_radius": 8, "crop_radius": 8, "clip_threshold": 0.95}
    by_signal = {
        s: rows.sort_values(["distance", "group_id"], ascending=[False, True])["group_id"].tolist()
        for s, rows in removed.groupby("signal")
    }
    chosen = choose_groups(removed.reset_index(), t, 3)
    assert list(chosen) == [by_signal["phash"][0], by_signal["phash_crop"][0], by_signal["phash"][1]]
    assert chosen[by_signal["phash_crop"][0]] == "crop removals, nearest its threshold first"
    assert list(dedupe_view(run, 3).groups[i]["group_id"] for i in range(3)) == list(chosen)
    assert list(choose_groups(removed.reset_index(), t, 100)) == list(
        dedupe_view(run, 100).groups[i]["group_id"] for i in range(8)
    )
    assert closeness("clip", 0.025, t) == pytest.approx(0.5) and closeness("phash_crop", 8, t) == 1.0


def test_largest_groups_come_first(hashed_run) -> None:
    run, removed = hashed_run
    rows = removed.reset_index()
    extra = rows.iloc[[0]].assign(image_id="f" * 16, group_id=rows["group_id"].iloc[-1], distance=0.0)
    t = {"hamming_radius": 8, "crop_radius": 8}
    chosen = choose_groups(pd.concat([rows, extra], ignore_index=True), t, 2)
    assert list(chosen)[0] == rows["group_id"].iloc[-1] and list(chosen.values())[0] == "largest groups first"


def test_an_older_run_without_aligned_or_crop_radii_still_shows_them(hashed_run, tmp_path) -> None:
    """pairs.parquet from before the `aligned` column, a summary without the crop radii: readers
    get a null column, and the report takes the radii from the settings the stage recorded."""
    run, removed = hashed_run
    old = tmp_path / "old"
    shutil.copytree(run, old)
    table = pq.read_table(old / "dedupe" / "pairs.parquet")
    pq.write_table(table.drop_columns(["aligned"]), old / "dedupe" / "pairs.parquet")
    summary = json.loads((old / "dedupe" / "summary.json").read_text())
    for key in ("crop_radius", "crop_confirm_radius"):
        del summary["thresholds"][key]
    (old / "dedupe" / "summary.json").write_text(json.dumps(summary))
    settings = {"inputs": {"dedupe.crop_radius": 7, "dedupe.crop_confirm_radius": 13}}
    (old / "dedupe" / "_SETTINGS.json").write_text(json.dumps(settings))
    assert read_pairs(old)["aligned"].isna().all()
    html = dupes_page.section_html(dedupe_view(old, 24), {})
    crop = removed[removed["signal"] == "phash_crop"].index[0]
    assert _evidence_lines(html)[crop][1].startswith("crop: distance 8 aligned bits, threshold ≤ 7 bits")
    assert "confirmed by dHash ≤ 13" in html


def test_pHash_crop_and_clip_removals_shown_together(ingested_run, tmp_path) -> None:
    """A tiny random-weight CLIP (mechanics only) with its threshold set just below the cosines of a
    few pairs: CLIP removals appear in the same section as the pHash and crop ones, each with its
    cosine distance and threshold."""
    import torch

    config_file = tmp_path / "lenses-tiny-clip.json"
    config_file.write_text(json.dumps(TINY_CLIP))
    clip = {"clip_model": "lenses-tiny-clip", "clip_model_config": str(config_file)}
    clip |= {"clip_random_weights": True, "clip_device": "cpu"}
    torch.manual_seed(0)
    _dedupe(ingested_run, tmp_path / "probe", **clip, clip_threshold=1.0, leakage_threshold=0.5)
    cosines = np.sort(read_pairs(tmp_path / "probe")["cosine"].dropna().to_numpy())[::-1]
    threshold = float(cosines[min(6, len(cosines) - 1)]) - 1e-4  # about six pairs at or above
    torch.manual_seed(0)  # the same random weights: the same cosines
    run = tmp_path / "run"
    removed = _dedupe(ingested_run, run, **clip, clip_threshold=threshold, leakage_threshold=threshold)
    assert (removed["signal"] == "clip").any()
    view = dedupe_view(run, 24)
    html = dupes_page.section_html(view, {})
    shown = _evidence_lines(html)
    assert set(shown) == set(removed.index)
    for image_id, rec in removed[removed["signal"] == "clip"].iterrows():
        assert shown[image_id] == (
            "clip",
            f"CLIP: distance {rec['distance']:.4f} (1 − cosine), threshold cosine ≥ {threshold}; "
            f"cosine {1 - rec['distance']:.4f}",
        )
    signals = {s for s, _ in shown.values()}
    assert "clip" in signals and signals & {"phash", "both", "phash_crop"}
    largest = max(g["size"] for g in view.groups)
    assert view.groups[0]["size"] == largest
    assert largest == 2 or view.groups[0]["why"] == "largest groups first"
