"""Zero-shot baselines through transformers (BLIP-2, BGE-VL-Large as CLIP, BGE-VL-MLLM), built tiny.

Every model is a random-weight copy written by training.dryrun.zero_shot and read back from its
directory exactly like a real local checkpoint; nothing is downloaded.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from training.baselines.hf_zero_shot import (  # noqa: E402
    ZeroShotUnavailable,
    hf_zero_shot_scores,
    load_hf_zero_shot,
    multi_query_scores,
)
from training.dryrun.zero_shot import materialize_tiny_blip2, materialize_tiny_hf_clip  # noqa: E402
from training.evaluation.config import ZeroShotSection  # noqa: E402
from training.evaluation.inputs import split_labels  # noqa: E402
from training.evaluation.scoring.zero_shot import zero_shot_systems  # noqa: E402

TEXTS = ["an astronaut in a white suit", "a cup of coffee on a saucer", "a calm and curious mood"]


@pytest.fixture(scope="module")
def labels(tiny_export):
    return split_labels(str(tiny_export), "train")


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory, labels):
    root = tmp_path_factory.mktemp("zero-shot")
    corpus = labels.captions + TEXTS
    return {
        "blip2": materialize_tiny_blip2(root / "blip2", corpus),
        "hf_clip": materialize_tiny_hf_clip(root / "bge-vl-large", corpus),
    }


def _images(bundle, paths):
    from PIL import Image

    return bundle.image_processor(images=[Image.open(p).convert("RGB") for p in paths], return_tensors="pt")[
        "pixel_values"
    ]


def test_blip2_scores_are_the_models_own_contrastive_scores(tiny_dirs, labels):
    bundle = load_hf_zero_shot("blip2", str(tiny_dirs["blip2"]))
    paths = labels.image_paths[:3]
    got = hf_zero_shot_scores(bundle, paths, TEXTS, batch_size=2)  # batches split images and texts
    tok = bundle.tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        ref = bundle.model(pixel_values=_images(bundle, paths), **tok, use_image_text_matching_head=False)
    assert got.shape == (3, 3)
    np.testing.assert_allclose(got, ref.logits_per_image.numpy(), rtol=1e-4, atol=1e-5)


def test_bge_vl_large_clip_scores_are_cosines_of_the_models_features(tiny_dirs, labels):
    bundle = load_hf_zero_shot("hf_clip", str(tiny_dirs["hf_clip"]))
    paths = labels.image_paths[:4]
    got = hf_zero_shot_scores(bundle, paths, TEXTS, batch_size=3)
    tok = bundle.tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        ref = bundle.model(pixel_values=_images(bundle, paths), **tok)
        expected = (ref.logits_per_image / bundle.model.logit_scale.exp()).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    assert tok["input_ids"][0, -1] == bundle.tokenizer.eos_token_id  # CLIP pools the EOS token


def test_multi_query_score_is_the_best_query(tiny_dirs):
    img = torch.nn.functional.normalize(torch.randn(5, 4, 8), dim=-1)
    txt = torch.nn.functional.normalize(torch.randn(3, 8), dim=-1)
    got = multi_query_scores(img, txt, image_chunk=2)
    want = np.array([[max(float(q @ t) for q in im) for t in txt] for im in img])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_vlm2vec_phi3_is_unavailable_and_missing_directories_fail(tmp_path):
    with pytest.raises(ZeroShotUnavailable, match="Phi-3.5-V, whose modeling code is remote code"):
        load_hf_zero_shot("vlm2vec_phi3", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        load_hf_zero_shot("blip2", str(tmp_path / "absent"))
    with pytest.raises(ValueError, match="needs path"):
        ZeroShotSection(row="BLIP-2", family="blip2")


def test_zero_shot_systems_run_every_family_and_mark_unavailable_rows(tiny_dirs, tiny_base, labels):
    entries = [
        ZeroShotSection(row="BLIP-2", family="blip2", path=str(tiny_dirs["blip2"])),
        ZeroShotSection(row="BGE-VL-Large", family="hf_clip", path=str(tiny_dirs["hf_clip"])),
        ZeroShotSection(row="VLM2Vec", family="vlm2vec_phi3"),
        ZeroShotSection(
            row="BGE-VL-MLLM", family="bge_vl_mllm", path=str(tiny_base), train_config="tiny", batch_size=4
        ),
        ZeroShotSection(row="CLIP", family="open_clip", model_config_path=_tiny_open_clip()),
    ]
    paths, texts = labels.image_paths[:5], labels.captions[:7]
    scores, unavailable = zero_shot_systems(entries, paths, texts)
    assert set(scores) == {"BLIP-2", "BGE-VL-Large", "BGE-VL-MLLM", "CLIP"}
    assert list(unavailable) == ["VLM2Vec"] and "trust_remote_code" in unavailable["VLM2Vec"]
    for name, sim in scores.items():
        assert sim.shape == (5, 7) and np.isfinite(sim).all(), name
        assert not np.allclose(sim[0], sim[1]), name  # images are encoded, not a constant
    # BGE-VL-MLLM scores are cosines of its global embeddings
    assert np.abs(scores["BGE-VL-MLLM"]).max() <= 1.0 + 1e-5


def _tiny_open_clip() -> str:
    from training.evaluation.config import CONFIG_DIR

    return str(CONFIG_DIR / "eval-tiny-openclip.json")
