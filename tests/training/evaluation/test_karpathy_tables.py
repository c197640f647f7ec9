"""Supp. Tables 1-2 (COCO, Flickr30K Karpathy test sets) and baselines.open_clip in its paper row
of main Table 2: hand-made scores, then the tiny model through `lenses evaluate`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from training.evaluation.config import EvalConfig  # noqa: E402
from training.evaluation.evaluate import evaluate_encoded  # noqa: E402
from training.evaluation.external.karpathy import karpathy_metrics  # noqa: E402
from training.evaluation.tables.paper_tables import paper_tables_markdown, supp_karpathy_table  # noqa: E402
from training.evaluation.types import MAIN_SYSTEM  # noqa: E402
from training.external.karpathy import KarpathySet  # noqa: E402

from ..external.test_karpathy import write_coco  # noqa: E402
from .test_evaluate import random_split  # noqa: E402
from .test_paper_tables import _cells, _line  # noqa: E402

OC_JSON = Path(__file__).resolve().parents[3] / "training" / "configs" / "eval-tiny-openclip.json"


def test_an_image_query_is_a_hit_when_any_of_its_captions_is_retrieved():
    # 3 images x 5 captions. Image 0 ranks its 5th caption first; image 1 ranks a caption of
    # image 2 first and its own 2nd; image 2 ranks its own captions only from rank 6 on.
    ds = KarpathySet([f"i{i}" for i in range(3)], [f"t{j}" for j in range(15)],
                     np.repeat(np.arange(3), 5), np.zeros(15, np.int64))  # fmt: skip
    sim = np.zeros((3, 15), np.float32)
    sim[0, 4] = 1.0
    sim[1, 10], sim[1, 5] = 1.0, 0.9
    sim[2, :10] = 0.5  # above its own captions (0.0); lower indices win ties
    m = karpathy_metrics(sim, ds)
    assert m["all/i2t/R@1"] == pytest.approx(100 / 3)  # image 0 only
    assert m["all/i2t/R@5"] == pytest.approx(200 / 3)  # image 1's own caption at rank 2
    assert m["all/i2t/R@10"] == pytest.approx(200 / 3)  # image 2's own captions start at rank 11
    # T->I: a caption's image is at rank 1 when it has the column's highest score, ties going to
    # the lower image index (argmax picks the first maximum).
    t2i = (sim.argmax(0) == ds.caption_image).mean() * 100
    assert m["all/t2i/R@1"] == pytest.approx(t2i)
    assert m["RSUM"] == pytest.approx(sum(m[f"all/{d}/R@{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10)))


def test_supp_table_rows_and_notes():
    metrics = {f"all/{d}/R@{k}": 10.0 * k + (d == "t2i") for d in ("i2t", "t2i") for k in (1, 5, 10)}
    res = {
        "systems": {"OpenAI CLIP-B/16": metrics, "Lenses - All": metrics, "My CLIP": metrics},
        "unavailable": {"Lenses - Literal": "lens model read from encodings_dir", "Jina-v4": "remote code"},
        "file": "dataset_coco.json", "split": "test", "n_images": 3, "n_captions": 15,
        "n_rejected": 1, "n_captions_beyond_limit": 2, "n_images_with_prompts": 0,
    }  # fmt: skip
    table = supp_karpathy_table({"coco": res}, "coco")
    assert _cells(_line(table, "| OpenAI CLIP-B/16 |"))[1:8] == [
        "10.00",
        "50.00",
        "100.00",
        "11.00",
        "51.00",
        "101.00",
        "",
    ]
    assert "not run: no baselines.zero_shot entry with row 'EVA-02-CLIP-B/16'" in _line(
        table, "| EVA-02-CLIP-B/16 |"
    )
    assert "unavailable: MagicLens" in _line(table, "| MagicLens-B |")
    assert "not run: no baselines.zero_shot entry with row 'VLM2Vec'" in _line(table, "| VLM2Vec |")
    assert "unavailable: lens model read from encodings_dir" in _line(table, "| Lenses - Literal |")
    assert _cells(_line(table, "| My CLIP |"))[1] == "10.00"  # configured systems without a paper row
    assert "unavailable: remote code" in _line(table, "| Jina-v4 |")  # ... also those that could not run
    assert "1 entries rejected, 2 captions beyond the per-image limit" in table
    assert "not run: external.flickr30k not configured" in supp_karpathy_table({}, "flickr30k")


def test_table2_clip_rows_come_from_baselines_open_clip():
    from training.baselines.global_only import global_scores

    enc = random_split()
    oc = "Zero-shot open_clip (tiny, random weights)"
    results = evaluate_encoded(enc, EvalConfig(), {oc: global_scores(enc.img_global, enc.txt_global)})
    results["zero_shot"] = {"rows": [], "unavailable": {}}
    results["open_clip_row"] = {"row": "OpenCLIP", "system": oc}
    report = "\n\n".join(paper_tables_markdown(results))
    want = results["systems"]["lens_gallery"][oc]
    row = _cells(_line(report, "| OpenCLIP |"))
    assert (
        row[1] == f"{want['literal/i2t/R@1']:.2f}"
        and row[-2] == f"{want['all/t2i/R@5']:.2f}"
        and row[-1] == f"baselines.open_clip: {oc}"  # the row says where its numbers come from
    )
    assert "not run" in _line(report, "| CLIP |")
    # OpenAI weights: the same model fills the CLIP row instead.
    results["open_clip_row"]["row"] = "CLIP"
    report = "\n\n".join(paper_tables_markdown(results))
    assert _cells(_line(report, "| CLIP |"))[1] == row[1] and "not run" in _line(report, "| OpenCLIP |")
    # A baselines.zero_shot entry named for the row wins over baselines.open_clip.
    results["systems"]["lens_gallery"]["CLIP"] = results["systems"]["lens_gallery"][MAIN_SYSTEM]
    report = "\n\n".join(paper_tables_markdown(results))
    # (the Lenses row reads its lens-c slots; "Lenses, full score" is the same matrix as this CLIP row)
    assert _cells(_line(report, "| CLIP |"))[1] == _cells(_line(report, "| Lenses, full score |"))[1]


@pytest.mark.slow
def test_lenses_evaluate_writes_supp_tables_1_and_2(tiny_config, tiny_export, tmp_path):
    """The tiny (untrained) lens model, baselines.open_clip and an open_clip zero-shot row on tiny
    COCO and Flickr30K caption files; the report's numbers are those of metrics.json."""
    import pandas as pd
    import yaml

    from lenses_app.cli import main

    coco = write_coco(tmp_path / "coco")
    flickr = tmp_path / "flickr" / "dataset_flickr30k.json"
    flickr.parent.mkdir()
    flickr.write_text(coco.read_text())  # the same entries, images found without the filepath folder
    for p in (tmp_path / "coco" / "images" / "val2014").iterdir():
        (tmp_path / "flickr" / p.name).write_bytes(p.read_bytes())
    pd.DataFrame([("COCO_val2014_1.jpg", "Literal", "a cat")], columns=["filename", "lens", "text"]).to_csv(
        tmp_path / "prompts.csv", index=False
    )
    train_yaml = tmp_path / "train.yaml"
    train_yaml.write_text(yaml.safe_dump(tiny_config.model_dump(mode="json")))
    oc = {"model_name": "x", "model_config_path": str(OC_JSON)}
    cfg = {
        "export_dir": str(tiny_export), "train_config": str(train_yaml), "routing": False,
        "metrics": {"protocols": ["lens_gallery"]},
        "baselines": {"open_clip": {"enabled": True, **oc}, "similarity_ablations": False, "text_only": False,
                      "zero_shot": [{"row": "OpenAI CLIP-B/16", "family": "open_clip", **oc},
                                     {"row": "VLM2Vec", "family": "vlm2vec_phi3"}]},
        "external": {
            "coco": {"captions_json": str(coco), "images_dir": str(tmp_path / "coco" / "images"),
                     "prompts": str(tmp_path / "prompts.csv")},
            "flickr30k": {"captions_json": str(flickr), "images_dir": str(tmp_path / "flickr"),
                          "captions_per_image": None},
        },
    }  # fmt: skip
    (tmp_path / "eval.yaml").write_text(yaml.safe_dump(cfg))
    out = tmp_path / "out"
    assert main(["evaluate", "--config", str(tmp_path / "eval.yaml"), "--out", str(out)]) == 0
    data = json.loads((out / "metrics.json").read_text())
    report = (out / "report.md").read_text()
    for key, heading, n_captions in (("coco", "## Supp. Table 1", 7), ("flickr30k", "## Supp. Table 2", 8)):
        res = data[key]
        assert res["n_images"] == 2 and res["n_captions"] == n_captions
        assert {"OpenAI CLIP-B/16", "Lenses - All", "Lenses - Literal"} <= set(res["systems"])
        assert any(s.startswith("Zero-shot open_clip") for s in res["systems"])
        section = report.split(heading)[1].split("\n## ")[0]
        assert "VLM2Vec" in res["unavailable"] and "unavailable: vlm2vec_phi3" in _line(
            section, "| VLM2Vec |"
        )
        for row in ("OpenAI CLIP-B/16", "Lenses - All", "Lenses - Literal"):
            cells = _cells(_line(section, f"| {row} |"))
            m = res["systems"][row]
            assert cells[1] == f"{m['all/i2t/R@1']:.2f}" and cells[6] == f"{m['all/t2i/R@10']:.2f}", row
            assert 0 <= m["all/i2t/R@1"] <= m["all/i2t/R@5"] <= 100
    assert data["coco"]["n_images_with_prompts"] == 1 and data["coco"]["n_captions_beyond_limit"] == 1
    assert data["flickr30k"]["n_captions_beyond_limit"] == 0
    # Main Table 2's OpenCLIP row holds baselines.open_clip's numbers.
    oc_name = data["open_clip_row"]["system"]
    want = data["systems"]["lens_gallery"][oc_name]["all/i2t/R@1"]
    table2 = report.split("## Main Table 2")[1].split("\n## ")[0]
    assert _cells(_line(table2, "| OpenCLIP |"))[-5] == f"{want:.2f}"  # All I→T R@1


def test_table5_openclip_row_from_the_artemis_entry_of_baselines_open_clip():
    from training.evaluation.tables.paper_tables import table5

    m = {f"all/{d}/R@{k}": float(k) for d in ("i2t", "t2i") for k in (1, 5, 10)}
    art = {"systems": {}, "unavailable": {}, "n_images": 2, "n_captions": 2, "n_rejected_rows": 0,
           "n_images_with_prompts": 0}  # fmt: skip
    results = {"artemis": art, "external": {"ArtEmis (zero-shot open_clip)": m},
               "open_clip_row": {"row": "CLIP", "system": "Zero-shot open_clip (x)"}}  # fmt: skip
    table = table5(results)
    assert _cells(_line(table, "| CLIP |"))[1:8] == [
        "1.00",
        "5.00",
        "10.00",
        "1.00",
        "5.00",
        "10.00",
        "baselines.open_clip: Zero-shot open_clip (x)",
    ]
    assert "not run" in _line(table, "| OpenCLIP |")
    results["open_clip_row"]["row"] = None  # placement switched off
    assert "not run" in _line(table5(results), "| CLIP |")


def test_lenses_rows_score_all_slots_and_the_literal_slot_only(tiny_retriever, tmp_path):
    """Lenses - All is Eq. 4 with the five text slots; Lenses - Literal is the same encodings
    with only the Literal text slot (main Sec. 4.2's one-lens score)."""
    from training.evaluation.external.karpathy import LENSES_ALL, LENSES_LITERAL, _lens_model_scores
    from training.evaluation.inputs import encode_in_process
    from training.evaluation.scoring.similarity import score_lens_slots, score_one_lens
    from training.evaluation.types import SplitLabels
    from training.external.karpathy import read_karpathy
    from training.retriever.config import load_train_config

    retriever, processor, _ = tiny_retriever
    data_cfg = load_train_config("tiny").data
    ds = read_karpathy(write_coco(tmp_path), tmp_path / "images")
    prompt_sets = [[("a cat", 0), ("calm", 4)], [("a coffee cup", 0)]]
    got = _lens_model_scores((retriever, processor, data_cfg), ds, prompt_sets, EvalConfig())
    labels = SplitLabels(ds.image_paths, ds.image_paths, [str(i) for i in range(len(ds.texts))], ds.texts,
                         ds.caption_image, ds.caption_lens, prompt_sets, [], np.zeros(0, np.int64),
                         np.zeros(0, np.int64))  # fmt: skip
    enc = encode_in_process(retriever, processor, data_cfg, labels)
    want_all = score_lens_slots(
        enc.img_slots, enc.img_slot_lens, enc.img_global, enc.txt_slots, enc.txt_global
    )
    want_literal = score_one_lens(
        enc.img_slots, enc.img_slot_lens, enc.img_global, enc.txt_slots[:, 0], enc.txt_global, 0
    )
    np.testing.assert_allclose(got[LENSES_ALL], want_all, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[LENSES_LITERAL], want_literal, rtol=1e-5, atol=1e-6)
    assert not np.allclose(
        got[LENSES_ALL], got[LENSES_LITERAL]
    )  # image 0's Emotional slot counts in All only
