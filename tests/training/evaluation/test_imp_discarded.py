"""IMP AUPRC negatives from the texts the validators discarded: the reader, the pair scores and
`lenses evaluate` counting which images had one and which fell back to the shifted negatives."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from lenses_data import io  # noqa: E402
from lenses_data.schemas import LensText, Rejection  # noqa: E402
from training.evaluation.config import EvalConfig  # noqa: E402
from training.evaluation.imp.discarded import (  # noqa: E402
    discard_grounds,
    imp_negative_texts,
    lens_pair_scores,
    one_per_image,
    split_negative_columns,
    visual_only,
)
from training.evaluation.inputs import discarded_captions, split_labels  # noqa: E402
from training.evaluation.scoring.similarity import all_lens_text_slots, score_lens_slots  # noqa: E402

from .test_evaluate import random_split  # noqa: E402


def _text(text_id: str, image_id: str, kind: str = "caption", lens: str = "Emotional") -> LensText:
    return LensText(text_id=text_id, image_id=image_id, kind=kind, lens=lens, text=f"discarded {text_id}",
                    focus="f", prompt_name="p", prompt_hash="h", model="m", simulated=True)  # fmt: skip


def _rejection(text_id: str, image_id: str, stage: str = "validate", reason: str = "validator_discarded"):
    return Rejection(stage=stage, record_id=text_id, reason=reason, message=f"m {text_id}", image_id=image_id)


def build_run(tiny_export: Path, root: Path, split: str) -> tuple[Path, dict[str, list[str]]]:
    """RUN/export (a copy of the tiny export) with rejections.parquet, RUN's generate stage with
    the texts. Returns the export and {image_id: its discarded caption ids} of `split`."""
    export = root / "run" / "export"
    shutil.copytree(tiny_export, export)
    images = pd.read_parquet(export / "images.parquet")
    ids = sorted(images[images["split"] == split]["image_id"].astype(str))
    other = str(images[images["split"] != split]["image_id"].iloc[0])
    first, second = ids[0], ids[1]
    texts = [_text("d1", first), _text("d0", first), _text("v1", second), _text("p1", second, "prompt"),
             _text("x1", other), _text("r1", second), _text("a1", second)]  # fmt: skip
    rejections = [_rejection("d1", first), _rejection("d0", first), _rejection("v1", second, "visual_validate"),
                  _rejection("p1", second), _rejection("x1", other), _rejection("r1", second, "rules", "too_long"),
                  _rejection("gone", second), _rejection("a1", second)]  # fmt: skip
    io.write_table(export / "rejections.parquet", io.to_table(rejections, Rejection))
    io.write_shard(root / "run", "generate", 0, texts, LensText)
    # per image the visual validator's discards first (v1 before a1), then by text id
    return export, {first: ["d0", "d1"], second: ["v1", "a1"]}


def test_reader_keeps_the_validators_discarded_captions_of_the_split(tiny_export, tmp_path):
    export, want = build_run(tiny_export, tmp_path, "test")
    labels = split_labels(str(export), "test")
    got = discarded_captions(str(export), None, labels)  # the run is the export folder's parent
    # prompts, other splits, other stages' reasons and texts missing from generate are left out
    assert got.texts == [f"discarded {t}" for ids in want.values() for t in ids]
    assert got.image.tolist() == [labels.image_ids.index(i) for i, ids in want.items() for _ in ids]
    assert got.lens.tolist() == [4, 4, 4, 4]
    assert got.text_ids == [t for ids in want.values() for t in ids]
    assert got.validator == ["validate", "validate", "visual_validate", "validate"]
    assert got.rejection == [f"validator_discarded: m {t}" for ids in want.values() for t in ids]
    assert "4 discarded captions" in got.note and "(2 discarded texts not captions" in got.note
    chosen = one_per_image(got)  # IMP's one negative per image: the visual validator's where there is one
    assert chosen.text_ids == ["d0", "v1"] and chosen.image.tolist() == got.image[[0, 2]].tolist()
    assert chosen.rejection == ["validator_discarded: m d0", "validator_discarded: m v1"]
    visual = one_per_image(visual_only(got))  # imp.negatives: visual_discarded
    assert visual.text_ids == ["v1"] and visual.image.tolist() == got.image[[2]].tolist()
    assert visual.validator == ["visual_validate"] and "visual validator's only: 1 of 4 kept" in visual.note
    cfg = EvalConfig.model_validate({"export_dir": str(export), "split": "test",
                                     "imp": {"difficulty_table": "t.parquet", "negatives": "visual_discarded"}})  # fmt: skip
    assert imp_negative_texts(cfg, labels).text_ids == ["v1"]
    assert imp_negative_texts(cfg.model_copy(update={"imp": None}), labels) is None
    assert "shown the image" in discard_grounds("visual_validate")
    assert "never shown the image" in discard_grounds("validate")
    none = discarded_captions(str(tiny_export), None, labels)  # an export without rejections.parquet
    assert none.texts == [] and "rejections.parquet" in none.note
    no_run = discarded_captions(str(export), str(tmp_path / "elsewhere"), labels)
    assert no_run.texts == [] and "not found" in no_run.note


def test_lens_pair_scores_are_the_full_scores_of_each_text_with_its_image():
    enc = random_split(seed=5)
    rng = np.random.default_rng(0)
    k, d = 7, enc.txt_slots.shape[-1]
    image = rng.integers(0, len(enc.img_global), k)
    slots, glob = torch.randn(k, 5, d), torch.randn(k, d)
    cfg = EvalConfig()
    got = lens_pair_scores(enc, image, slots, glob, all_lens_text_slots(k), cfg)
    full = score_lens_slots(enc.img_slots, enc.img_slot_lens, enc.img_global, slots, glob)  # [n_img, k]
    np.testing.assert_allclose(got, full[image, np.arange(k)], atol=1e-6)


def test_evaluate_counts_discarded_and_shifted_negatives_per_system(tiny_export, tmp_path):
    """open_clip scores the discarded captions; the lens model from encodings only (no checkpoint
    to encode new texts) falls back to the shifted negatives for every image, and says so."""
    from lenses_app.cli import main
    from tests.training.evaluation.test_evaluate import write_fake_encodings

    export, want = build_run(tiny_export, tmp_path, "test")
    labels = write_fake_encodings(export, "test", tmp_path / "enc")
    oc_json = Path(__file__).resolve().parents[3] / "training" / "configs" / "eval-tiny-openclip.json"
    voters = [{"name": f"v{t}", "model_config_path": str(oc_json), "threshold": t} for t in (-1.0, 1.1)]
    cfg = {"export_dir": str(export), "split": "test", "encodings_dir": str(tmp_path / "enc"),
           "baselines": {"text_only": False, "similarity_ablations": False,
                         "open_clip": {"enabled": True, "model_config_path": str(oc_json)}},
           "routing": False, "metrics": {"protocols": ["lens_gallery"]},
           "imp": {"models": [*voters, {**voters[0], "name": "g", "role": "tie_breaker"}]}}  # fmt: skip
    (tmp_path / "eval.yaml").write_text(json.dumps(cfg))
    assert main(["evaluate", "--config", str(tmp_path / "eval.yaml"), "--out", str(tmp_path / "o")]) == 0
    data = json.loads((tmp_path / "o" / "metrics.json").read_text())
    n_images = len(set(labels.caption_image.tolist()))
    clip = next(v for k, v in data["imp"].items() if k.startswith("Zero-shot open_clip"))
    assert clip["n_negatives_discarded"] == len(want) and clip["n_negatives_shifted"] == n_images - len(want)
    assert clip["negatives"].startswith("same image's discarded caption: 1 visual-, 1 text-validator")
    lens = data["imp"]["Lenses (lens-masked + global)"]
    assert lens["n_negatives_discarded"] == 0 and lens["n_negatives"] == n_images
    assert (
        lens["negatives"].startswith("another image's caption (shifted)")
        and "encodings_dir" in lens["negatives"]
    )
    meta = data["meta"]["imp_negatives"]
    assert meta["scored_by"] == [next(k for k in data["imp"] if k.startswith("Zero-shot open_clip"))]
    assert "4 discarded captions" in meta["source"]


def test_split_negative_columns_reads_each_chosen_text_with_its_own_image():
    from training.evaluation.types import DiscardedTexts

    sim = np.arange(3 * 6, dtype=np.float32).reshape(3, 6)  # 3 images, 4 captions + 2 chosen texts
    chosen = DiscardedTexts(["x", "y"], np.array([2, 0]), np.array([0, 0]), "", ["x", "y"], ["validate"] * 2)
    systems, pairs = split_negative_columns({"a": sim, "b": sim[:, :4]}, 4, chosen)
    np.testing.assert_array_equal(systems["a"], sim[:, :4])
    np.testing.assert_array_equal(pairs["a"], [sim[2, 4], sim[0, 5]])
    assert "b" not in pairs  # scored without the chosen texts: falls back, never misread
    with pytest.raises(ValueError, match="5 score columns"):
        split_negative_columns({"c": sim[:, :5]}, 4, chosen)


def _tiny_open_clip_weights(path: Path) -> tuple[str, str]:
    """(architecture JSON, weights file) of a tiny random open_clip saved once, so that every load
    (the run's and the test's own) has the same weights."""
    from training.baselines.open_clip import load_open_clip

    arch = str(Path(__file__).resolve().parents[3] / "training" / "configs" / "eval-tiny-openclip.json")
    torch.manual_seed(0)
    model, _, _ = load_open_clip("tiny", model_config=arch)
    torch.save(model.state_dict(), path)
    return arch, str(path)


@pytest.mark.slow
def test_every_imp_system_scores_the_same_images_discarded_captions(
    tiny_config, tiny_export, tiny_base, tmp_path
):
    """Every system of the IMP tables (lens model, global-only from its checkpoint, open_clip, the
    zero-shot families, CLIP fine-tuned) gets each image's own discarded caption, the visual
    validator's where there is one; none falls back to another image's caption."""
    import yaml

    from lenses_app.cli import main
    from training.baselines.open_clip import encode_open_clip, load_open_clip
    from training.dryrun.zero_shot import materialize_tiny_blip2, materialize_tiny_hf_clip
    from training.evaluation.imp.metrics import auprc

    from .test_paper_tables import _train

    export, _ = build_run(tiny_export, tmp_path, "test")
    ckpt = _train(tiny_config, tmp_path / "main")
    glob_cfg = tiny_config.model_copy(deep=True)
    glob_cfg.loss.mode = "global"
    global_ckpt = _train(glob_cfg, tmp_path / "global")
    arch, weights = _tiny_open_clip_weights(tmp_path / "tiny-clip.pt")
    corpus = ["a calm cat", "so bright", "discarded caption"]
    oc = {"model_config_path": arch, "pretrained": weights}
    voters = [{"name": f"v{t}", "model_config_path": arch, "threshold": t} for t in (-1.0, 1.1)]
    cfg = {"export_dir": str(export), "split": "test", "checkpoint": ckpt, "routing": False,
           "metrics": {"protocols": ["lens_gallery"]},
           "baselines": {"text_only": False, "similarity_ablations": False, "global_only_checkpoint": global_ckpt,
                         "open_clip": {"enabled": True, "row": None, **oc},
                         "clip_finetune": {"enabled": True, "model_config_path": arch, "steps": 1, "images_per_batch": 4},
                         "zero_shot": [{"row": "CLIP", "family": "open_clip", "path": weights, "model_config_path": arch},
                                       {"row": "BLIP-2", "family": "blip2", "path": str(materialize_tiny_blip2(tmp_path / "b", corpus))},
                                       {"row": "BGE-VL-Large", "family": "hf_clip", "path": str(materialize_tiny_hf_clip(tmp_path / "c", corpus))},
                                       {"row": "BGE-VL-MLLM", "family": "bge_vl_mllm", "path": str(tiny_base), "train_config": "tiny"}]},
           "imp": {"models": [*voters, {**voters[0], "name": "g", "role": "tie_breaker"}]}}  # fmt: skip
    (tmp_path / "eval.yaml").write_text(yaml.safe_dump(cfg))
    out = tmp_path / "o"
    assert main(["evaluate", "--config", str(tmp_path / "eval.yaml"), "--out", str(out)]) == 0
    data = json.loads((out / "metrics.json").read_text())

    # The chosen negatives: each image's own discarded caption, the visual validator's first.
    chosen = pd.read_parquet(out / "imp" / "negatives.parquet")
    owner = pd.read_parquet(export / "rejections.parquet").set_index("record_id")["image_id"]
    assert chosen["text_id"].tolist() == ["d0", "v1"]
    assert chosen["validator"].tolist() == ["validate", "visual_validate"]
    assert chosen["rejection"].tolist() == ["validator_discarded: m d0", "validator_discarded: m v1"]
    assert chosen["grounds"].tolist() == [discard_grounds("validate"), discard_grounds("visual_validate")]
    assert [owner[t] for t in chosen["text_id"]] == chosen["image_id"].tolist()
    # Every system scored them; its row says so.
    systems = {"Lenses (lens-masked + global)", "Global-only fine-tuned", "CLIP (fine-tuned on Lenses)",
               "CLIP", "BLIP-2", "BGE-VL-Large", "BGE-VL-MLLM"}  # fmt: skip
    assert systems < set(data["imp"]) and len(data["imp"]) == len(systems) + 1  # + baselines.open_clip
    for name, m in data["imp"].items():
        assert (m["n_negatives_discarded"], m["n_negatives_shifted"]) == (2, 0), name
        assert (m["n_negatives_visual"], m["n_negatives_text"]) == (1, 1), name
        assert m["negatives"] == "same image's discarded caption: 1 visual-, 1 text-validator", name
    assert data["meta"]["imp_negatives"]["fell_back"] == {}
    report = (out / "report.md").read_text().split("(IMP Table 5)")[1]
    assert report.count("| same image's discarded caption: 1 visual-, 1 text-validator |") == len(data["imp"])

    # The numbers: the zero-shot CLIP row's AUPRC from the test's own scores of the same pairs.
    labels = split_labels(str(export), "test")
    img, txt = encode_open_clip(*load_open_clip("tiny", **{"model_config": arch, "pretrained": weights}),
                                labels.image_paths, [*labels.captions, *("discarded d0", "discarded v1")])  # fmt: skip
    sim = (img @ txt.T).numpy()
    n = len(labels.captions)
    pos = sim[labels.caption_image, np.arange(n)]
    rows = [labels.image_ids.index(i) for i in chosen["image_id"]]
    neg = sim[rows, [n, n + 1]]
    np.testing.assert_allclose(chosen["score/CLIP"], neg, atol=1e-6)  # each text with its own image
    want = auprc(np.r_[pos, neg], np.r_[np.ones(n), np.zeros(2)])
    assert data["imp"]["CLIP"]["all/AUPRC"] == pytest.approx(want, abs=1e-6)
