"""IMP's AltCLIP, ALIGN, GroupViT, BLIP and FLAVA rows (seed 003 Tables 3-5), built tiny.

Each family is a random-weight model written by training.dryrun.dual_encoders and read back
from its directory like a real local checkpoint (nothing is downloaded); its scores are checked
against the model's own forward pass, then scored as `baselines.zero_shot` rows.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from training.baselines.hf_dual_encoders import DUAL_ENCODER_CLASSES  # noqa: E402
from training.baselines.hf_zero_shot import hf_zero_shot_scores, load_hf_zero_shot  # noqa: E402
from training.dryrun.dual_encoders import materialize_tiny_dual_encoder  # noqa: E402
from training.evaluation.config import ZeroShotSection  # noqa: E402
from training.evaluation.inputs import split_labels  # noqa: E402
from training.evaluation.scoring.zero_shot import zero_shot_systems  # noqa: E402

TEXTS = ["an astronaut in a white suit", "a cup of coffee", "a calm and curious mood on a quiet evening"]
FAMILIES = sorted(DUAL_ENCODER_CLASSES)


@pytest.fixture(scope="module")
def labels(tiny_export):
    return split_labels(str(tiny_export), "train")


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory, labels):
    root = tmp_path_factory.mktemp("imp-dual")
    corpus = labels.captions + TEXTS
    return {f: materialize_tiny_dual_encoder(f, root / f, corpus) for f in FAMILIES}


def _unit(x):
    return torch.nn.functional.normalize(x, dim=-1)


def _reference_cosines(family: str, model, pixels, tok) -> np.ndarray:
    """[n_images, n_texts] cosines from the model's own forward pass."""
    with torch.no_grad():
        if family == "blip":  # BLIP's image-text contrastive output
            return model(pixel_values=pixels, use_itm_head=False, **tok).itm_score.numpy()
        if family == "flava":  # FLAVA's contrastive pair: projected [CLS] of each unimodal encoder
            out = model(pixel_values=pixels, skip_multimodal_encoder=True, **tok)
            img = _unit(model.image_projection(out.image_embeddings[:, 0, :]))
            txt = _unit(model.text_projection(out.text_embeddings[:, 0, :]))
            return (img @ txt.T).numpy()
        out = model(pixel_values=pixels, **tok)
        if family == "align":
            return (out.logits_per_image * model.temperature).numpy()
        return (out.logits_per_image / model.logit_scale.exp()).numpy()


@pytest.mark.parametrize("family", FAMILIES)
def test_scores_are_the_models_own_cosines(family, tiny_dirs, labels):
    from PIL import Image

    bundle = load_hf_zero_shot(family, str(tiny_dirs[family]))
    paths = labels.image_paths[:3]
    got = hf_zero_shot_scores(bundle, paths, TEXTS, batch_size=2)  # batches split images and texts
    images = [Image.open(p).convert("RGB") for p in paths]
    pixels = bundle.image_processor(images=images, return_tensors="pt")["pixel_values"]
    tok = dict(bundle.tokenizer(TEXTS, padding=True, return_tensors="pt"))
    tok.pop("token_type_ids", None)
    want = _reference_cosines(family, bundle.model, pixels, tok)
    assert got.shape == (3, 3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert np.ptp(got) > 1e-4  # a constant matrix would pass the comparison for a broken pooling too


@pytest.mark.parametrize("family", FAMILIES)
def test_a_caption_longer_than_the_position_table_is_truncated(family, tiny_dirs, labels):
    bundle = load_hf_zero_shot(family, str(tiny_dirs[family]))
    if family == "altclip":
        # RoBERTa positions start after the padding index
        assert bundle.max_text_tokens == 40 - bundle.tokenizer.pad_token_id - 1
    long_caption = " ".join(["astronaut"] * 80)  # ~80 tokens, the tiny models have 40 positions
    scores = hf_zero_shot_scores(bundle, labels.image_paths[:1], [long_caption, TEXTS[0]])
    assert scores.shape == (1, 2) and np.isfinite(scores).all()


def test_imp_rows_come_from_baselines_zero_shot(tiny_dirs, labels):
    entries = [ZeroShotSection(row=name, family=f, path=str(tiny_dirs[f]))
               for f, name in zip(FAMILIES, ("ALIGN", "AltCLIP", "BLIP", "FLAVA", "GroupViT"), strict=True)]  # fmt: skip
    scores, unavailable = zero_shot_systems(entries, labels.image_paths, labels.captions)
    assert unavailable == {}
    assert sorted(scores) == ["ALIGN", "AltCLIP", "BLIP", "FLAVA", "GroupViT"]
    n = (len(labels.image_paths), len(labels.captions))
    assert all(s.shape == n and np.isfinite(s).all() for s in scores.values())
    with pytest.raises(ValueError, match="needs path"):
        ZeroShotSection(row="FLAVA", family="flava")
