"""Evaluation run: results structure, reports on disk, CLI and flow."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from lenses_data.schemas import LENS_KEYS
from training.baselines.global_only import global_scores
from training.evaluation.config import EvalConfig, load_eval_config
from training.evaluation.evaluate import evaluate_encoded
from training.evaluation.metrics.lens_slot import lens_slot_metrics
from training.evaluation.metrics.retrieval import retrieval_metrics
from training.evaluation.run import write_outputs
from training.evaluation.scoring.similarity import score_lens_slots
from training.evaluation.types import MAIN_SYSTEM, EncodedSplit


def random_split(seed=0, n_img=12, per_image=4, dim=16, n_slots=6):
    g = torch.Generator().manual_seed(seed)
    n_txt = n_img * per_image
    caption_image = np.repeat(np.arange(n_img), per_image)
    caption_lens = torch.randint(0, 5, (n_txt,), generator=g).numpy()
    lens = torch.randint(0, 5, (n_img, n_slots), generator=g)
    lens[:, -2:] = -1
    prompt_image = np.repeat(np.arange(n_img), 2)
    return EncodedSplit(
        img_slots=torch.randn(n_img, n_slots, dim, generator=g),
        img_slot_lens=lens,
        img_global=torch.randn(n_img, dim, generator=g),
        txt_slots=torch.randn(n_txt, 5, dim, generator=g),
        txt_global=torch.randn(n_txt, dim, generator=g),
        caption_image=caption_image,
        caption_lens=caption_lens,
        prompt_global=torch.randn(len(prompt_image), dim, generator=g),
        prompt_image=prompt_image,
        prompt_lens=caption_lens[::2],
    )


def test_evaluate_encoded_and_reports(tmp_path):
    enc = random_split()
    cfg = EvalConfig(out_dir=str(tmp_path))
    glob = global_scores(enc.img_global, enc.txt_global)
    results = evaluate_encoded(enc, cfg, extra_systems={"Global-only": glob})
    assert list(results["systems"]) == ["lens_slot", "lens_gallery", "full_gallery"]
    lens_gallery = results["systems"]["lens_gallery"]
    assert set(lens_gallery) == {MAIN_SYSTEM, "Global-only"}
    assert lens_gallery["Global-only"] == retrieval_metrics(glob, enc.caption_image, enc.caption_lens)
    # The ablation's full model reuses the main scores; its global variant is the global system.
    assert results["ablations"]["Full model (lens-masked + global)"] == lens_gallery[MAIN_SYSTEM]
    assert results["ablations"]["Global only"] == lens_gallery["Global-only"]
    full = results["systems"]["full_gallery"][MAIN_SYSTEM]
    assert full["all/i2t/R@1"] == lens_gallery[MAIN_SYSTEM]["all/i2t/R@1"]  # 'all' is protocol-free
    # The lens-slot protocol needs slots: only the lens model has it, with the overall metrics
    # of the full score and the per-lens/macro numbers of lens_slot_metrics on the encodings.
    slot = results["systems"]["lens_slot"]
    assert set(slot) == {MAIN_SYSTEM}
    direct = lens_slot_metrics(
        enc.img_slots, enc.img_slot_lens, enc.img_global, enc.txt_slots, enc.txt_global,
        enc.caption_image, enc.caption_lens,
    )  # fmt: skip
    assert {k: v for k, v in slot[MAIN_SYSTEM].items() if k in direct} == direct
    assert slot[MAIN_SYSTEM]["RSUM"] == lens_gallery[MAIN_SYSTEM]["RSUM"]
    differs = [k for k in direct if k.startswith(LENS_KEYS) and direct[k] != lens_gallery[MAIN_SYSTEM].get(k)]
    assert differs  # a different protocol, not the lens-gallery numbers under another name
    assert np.nansum(results["routing"]["by_lens_counts"]) == len(enc.caption_lens)
    assert "P2C/R@1" in results["text_only"]

    paths = write_outputs(results, tmp_path)
    data = json.loads(paths["metrics"].read_text())  # strict JSON: NaN became null
    assert data["systems"]["lens_gallery"][MAIN_SYSTEM]["RSUM"] == pytest.approx(
        lens_gallery[MAIN_SYSTEM]["RSUM"]
    )
    report = paths["report"].read_text()
    assert "| Model | Literal I→T R@1 | Literal I→T R@5 | Literal T→I R@1" in report
    assert "protocol `lens_slot`" in report and "main Table 6" in report
    macro_row = next(
        line for line in report.splitlines() if line.startswith(f"| {MAIN_SYSTEM} | `lens_slot`")
    )
    assert f"| {slot[MAIN_SYSTEM]['macro/i2t/R@1']:.2f} |" in macro_row
    assert "I→T meanR (all pos.)" in report and "I→T queries without a lens slot" in report
    assert "Global fallback usage" in report and "P→C" in report
    assert paths["routing"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_eval_config_yaml_and_errors(tmp_path):
    cfg = load_eval_config("eval-tiny")
    assert cfg.split == "test" and cfg.scoring.alpha == 16.0
    bad = tmp_path / "bad.yaml"
    bad.write_text("scoring: {alpha: 16, bogus: 1}\n")
    with pytest.raises(ValueError, match="bogus"):
        load_eval_config(bad)
    with pytest.raises(FileNotFoundError):
        load_eval_config(tmp_path / "missing.yaml")


def _write_external(root):
    """Tiny ArtEmis and IRFL folders in their formats, reusing two skimage pictures."""
    import pandas as pd
    from PIL import Image
    from skimage import data

    for style, name, img in (("Baroque", "a_cat", data.chelsea()), ("Pop_Art", "a_cup", data.coffee())):
        (root / "wikiart" / style).mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(root / "wikiart" / style / f"{name}.jpg")
        (root / "irfl").mkdir(exist_ok=True)
        Image.fromarray(img).save(root / "irfl" / f"{name}.jpeg")
    pd.DataFrame(
        [
            ("Baroque", "a_cat", "contentment", "a calm cat", 3),
            ("Pop_Art", "a_cup", "excitement", "so bright", 3),
        ],
        columns=["art_style", "painting", "emotion", "utterance", "repetition"],
    ).to_csv(root / "artemis.csv", index=False)
    pd.DataFrame(
        [("a cat nap", '["a_cat.jpeg"]', '["a_cup.jpeg"]', "idiom")],
        columns=["phrase", "answer", "distractors", "figurative_type"],
    ).to_csv(root / "idiom_detection_task.csv", index=False)


@pytest.mark.slow
def test_lenses_evaluate_on_tiny_trained_model(tiny_config, tiny_export, tmp_path):
    """Train the tiny model for 2 steps with the training helper's loop, then `lenses evaluate`."""
    import yaml

    from lenses_app.cli import main
    from training.loop.train import train

    tiny_config.optim.max_steps = 2
    tiny_config.run.save_every = 2
    train(tiny_config)
    train_yaml = tmp_path / "train.yaml"
    train_yaml.write_text(yaml.safe_dump(tiny_config.model_dump(mode="json")))
    _write_external(tmp_path)
    from pathlib import Path

    oc_json = Path(__file__).resolve().parents[3] / "training" / "configs" / "eval-tiny-openclip.json"
    eval_yaml = tmp_path / "eval.yaml"
    eval_yaml.write_text(
        yaml.safe_dump(
            {
                "export_dir": str(tiny_export),
                "split": "test",
                "train_config": str(train_yaml),
                "baselines": {"open_clip": {"enabled": True, "model_config_path": str(oc_json)}},
                "external": {
                    "artemis": {
                        "csv": str(tmp_path / "artemis.csv"),
                        "wikiart_dir": str(tmp_path / "wikiart"),
                    },
                    "irfl": [
                        {
                            "csv": str(tmp_path / "idiom_detection_task.csv"),
                            "images_dir": str(tmp_path / "irfl"),
                        }
                    ],
                },
            }
        )
    )
    out = tmp_path / "eval-out"
    assert main(["evaluate", "--config", str(eval_yaml), "--out", str(out)]) == 0
    data = json.loads((out / "metrics.json").read_text())
    assert data["meta"]["lens_model"]["checkpoint"].endswith("step-0000002")
    systems = data["systems"]["lens_gallery"]
    assert MAIN_SYSTEM in systems and any(k.startswith("Zero-shot open_clip") for k in systems)
    n_img, n_cap = data["meta"]["n_images"], data["meta"]["n_captions"]
    assert n_img == 2 and n_cap > n_img
    # The reported numbers are those of the encodings written next to them.
    from training.evaluation.inputs import read_encodings, split_labels

    enc = read_encodings(out / "encodings", split_labels(str(tiny_export), "test"))
    sim = score_lens_slots(enc.img_slots, enc.img_slot_lens, enc.img_global, enc.txt_slots, enc.txt_global)
    want = retrieval_metrics(sim, enc.caption_image, enc.caption_lens)
    for key in ("all/i2t/R@1", "all/t2i/R@1", "all/i2t/meanR_allpos", "macro/t2i/R@1", "LC@10"):
        assert systems[MAIN_SYSTEM][key] == pytest.approx(want[key]), key
    slot = data["systems"]["lens_slot"][MAIN_SYSTEM]
    want_slot = lens_slot_metrics(
        enc.img_slots, enc.img_slot_lens, enc.img_global, enc.txt_slots, enc.txt_global,
        enc.caption_image, enc.caption_lens,
    )  # fmt: skip
    assert slot["macro/i2t/R@1"] == pytest.approx(want_slot["macro/i2t/R@1"])
    assert slot["macro/n_lenses"] == want_slot["macro/n_lenses"] >= 1
    assert "P2C/R@1" in data["text_only"] and set(data["ablations"]) >= {
        "Global only",
        "No-mask smooth Chamfer",
    }
    assert data["external"]["IRFL idiom_detection_task (zero-shot open_clip)"]["accuracy"] in (0.0, 100.0)
    irfl = data["irfl"]["systems"]  # seed 004's IRFL table: no adapter configured, so LoRA-CLIP is marked
    assert "unavailable" in irfl["Ours: LoRA-CLIP (seed 004)"] and "literal_bias" in irfl[next(iter(irfl))]
    assert "all/i2t/R@1" in data["external"]["ArtEmis (zero-shot open_clip)"]
    report = (out / "report.md").read_text()
    assert (out / "routing.png").exists() and "main Table 2" in report and "main Table 6" in report
    assert "protocol `lens_slot`" in report and "(all pos.)" in report
    assert "seed 004 Table 3 layout" in report and "| Ours: LoRA-CLIP (seed 004) | unavailable" in report
    assert (out / "encodings" / "manifest.json").exists()  # encoded through training.evaluation.encode


def write_fake_encodings(export_dir, split, out, dim=8, seed=0):
    """A folder in the `lenses encode` layout (training.evaluation.encode) with random vectors."""
    from training.evaluation.inputs import split_labels

    labels = split_labels(str(export_dir), split)
    rng = np.random.default_rng(seed)
    n_img, n_cap = len(labels.image_ids), len(labels.caption_ids)
    (out / "images").mkdir(parents=True)
    (out / "captions").mkdir()
    slot_lens = rng.integers(-1, 5, size=(n_img, 4)).astype(np.int8)
    np.savez(out / "images" / "chunk-00000.npz", ids=np.array(labels.image_ids),
             slots=rng.standard_normal((n_img, 4, dim)).astype(np.float16), slot_lens=slot_lens,
             **{"global": rng.standard_normal((n_img, dim)).astype(np.float16)})  # fmt: skip
    np.savez(out / "captions" / "chunk-00000.npz", ids=np.array(labels.caption_ids),
             image_ids=np.array([labels.image_ids[i] for i in labels.caption_image]),
             lens=labels.caption_lens.astype(np.int8), slots=rng.standard_normal((n_cap, 5, dim)).astype(np.float16),
             slot_lens=np.tile(np.arange(5, dtype=np.int8), (n_cap, 1)),
             **{"global": rng.standard_normal((n_cap, dim)).astype(np.float16)})  # fmt: skip
    (out / "manifest.json").write_text(json.dumps({"split": split, "mode": "lens"}))
    return labels


def test_read_encodings_aligns_with_export(tiny_export, tmp_path):
    from training.evaluation.inputs import read_encodings

    labels = write_fake_encodings(tiny_export, "valid", tmp_path / "enc")
    enc = read_encodings(tmp_path / "enc", labels)
    assert enc.txt_slots.shape == (len(labels.caption_ids), 5, 8) and enc.img_slots.dtype == torch.float16
    np.testing.assert_array_equal(enc.caption_image, labels.caption_image)
    other = write_fake_encodings(tiny_export, "test", tmp_path / "enc-test")
    with pytest.raises(ValueError, match="do not match"):
        read_encodings(tmp_path / "enc-test", labels)
    assert other.image_ids != labels.image_ids


@pytest.mark.slow
def test_evaluate_retriever_flow(eval_prefect_harness, tiny_export, tmp_path):
    import yaml

    from flows.evaluate import evaluate_retriever

    write_fake_encodings(tiny_export, "valid", tmp_path / "enc")
    cfg = tmp_path / "eval.yaml"
    oc_json = Path(__file__).resolve().parents[3] / "training" / "configs" / "eval-tiny-openclip.json"
    # IMP split as a flow step: two random-weight voters with fixed thresholds (one accepts all).
    voters = [{"name": f"v{t}", "model_config_path": str(oc_json), "threshold": t} for t in (-1.0, 1.1)]
    imp = {"models": [*voters, {**voters[0], "name": "g", "role": "tie_breaker"}]}
    cfg.write_text(
        yaml.safe_dump(
            {"export_dir": str(tiny_export), "split": "valid", "baselines": {"text_only": False}, "imp": imp}
        )
    )
    result = evaluate_retriever(
        config_path=str(cfg), encodings_dir=str(tmp_path / "enc"), out_dir=str(tmp_path / "o")
    )
    assert set(result["files"]) == {"metrics", "report", "routing"}
    data = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert data["meta"]["lens_model"]["encodings_dir"] == str(tmp_path / "enc")
    assert data["meta"]["imp_split"]["table"] == str(tmp_path / "o" / "imp" / "difficulty.parquet")
    n_pairs = data["meta"]["n_captions"]  # every 1-1 vote is broken by the accepting tie-breaker
    assert data["imp"][MAIN_SYSTEM]["medium/n_pairs"] == n_pairs

    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts()
    assert any(a.key == "evaluate-retriever-report" and "main Table 2" in (a.data or "") for a in artifacts)


def test_cli_reports_bad_inputs_without_traceback(tmp_path, capsys):
    from lenses_app.cli import main

    assert main(["evaluate", "--config", "eval-tiny", "--export", str(tmp_path / "missing")]) == 2
    assert "export table missing" in capsys.readouterr().err
