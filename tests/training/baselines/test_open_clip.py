"""The zero-shot open_clip baseline on a tiny random-weight architecture (nothing downloaded)."""

from __future__ import annotations

import json

import pytest
import torch

from training.baselines.global_only import global_scores
from training.baselines.open_clip import encode_open_clip, load_open_clip
from training.evaluation.metrics.retrieval import retrieval_metrics


@pytest.fixture(scope="module")
def tiny_open_clip(tmp_path_factory):
    cfg = {
        "embed_dim": 16,
        "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
        "text_cfg": {"context_length": 24, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
    }
    path = tmp_path_factory.mktemp("oc") / "lenses-tiny-clip.json"
    path.write_text(json.dumps(cfg))
    return load_open_clip("ignored", model_config=str(path))


def test_zero_shot_open_clip_random_weights(tiny_open_clip, tmp_path):
    from PIL import Image
    from skimage import data

    paths = []
    for name in ("astronaut", "coffee", "chelsea"):
        p = tmp_path / f"{name}.png"
        Image.fromarray(getattr(data, name)()).save(p)
        paths.append(str(p))
    model, preprocess, tokenizer = tiny_open_clip
    texts = ["an astronaut", "a cup of coffee", "a cat", "a ginger cat sitting"]
    img, txt = encode_open_clip(model, preprocess, tokenizer, paths, texts, batch_size=2)
    assert img.shape == (3, 16) and txt.shape == (4, 16)
    assert torch.allclose(img.norm(dim=-1), torch.ones(3), atol=1e-5)
    sim = global_scores(img, txt)
    m = retrieval_metrics(sim, [0, 1, 2, 2], [0, 0, 0, 4])
    assert 0.0 <= m["all/i2t/R@1"] <= 100.0 and m["all/i2t/R@5"] == 100.0  # 4 captions only


def test_open_clip_refuses_remote_weights(tmp_path):
    with pytest.raises(FileNotFoundError, match="local open_clip checkpoint"):
        load_open_clip("ViT-B-32", pretrained="openai")
