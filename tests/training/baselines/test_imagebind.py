"""The ImageBind row (IMP Tables 3-5): OpenCLIP ViT-H-14 through open_clip, built at small width.

ImageBind initialises its image and text encoders from OpenCLIP ViT-H and keeps them frozen, so
its image-text scores are that model's. The tiny model is open_clip's own ViT-H-14 configuration
shrunk (same blocks, patch 14, context 77), and the row's scores are compared with the model's
own forward (`model(image, text)`, which returns the normalised features).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
open_clip = pytest.importorskip("open_clip")

from training.evaluation.config import ZeroShotSection  # noqa: E402
from training.evaluation.inputs import split_labels  # noqa: E402
from training.evaluation.scoring.zero_shot import zero_shot_systems  # noqa: E402


def tiny_vit_h14(root) -> tuple[str, str]:
    """(architecture JSON, weights file): open_clip's ViT-H-14 config at width 32, one layer each."""
    from training.baselines.open_clip import load_open_clip

    cfg = open_clip.get_model_config("ViT-H-14")
    cfg["embed_dim"] = 16
    cfg["vision_cfg"].update({"image_size": 56, "layers": 1, "width": 32, "head_width": 16})
    cfg["text_cfg"].update({"width": 32, "heads": 2, "layers": 1})
    arch, weights = root / "tiny-vit-h-14.json", root / "tiny-vit-h-14.pt"
    arch.write_text(json.dumps(cfg))
    torch.manual_seed(0)
    torch.save(load_open_clip("ViT-H-14", model_config=str(arch))[0].state_dict(), weights)
    return str(arch), str(weights)


def test_imagebind_scores_are_the_open_clip_vit_h14_forward(tiny_export, tmp_path):
    from PIL import Image

    from training.baselines.open_clip import load_open_clip

    arch, weights = tiny_vit_h14(tmp_path)
    labels = split_labels(str(tiny_export), "train")
    paths, texts = labels.image_paths[:4], labels.captions[:6]
    entry = ZeroShotSection(row="ImageBind", family="imagebind", model_name="ViT-H-14",
                            model_config_path=arch, path=weights)  # fmt: skip
    scores, unavailable = zero_shot_systems([entry], paths, texts)
    assert unavailable == {} and scores["ImageBind"].shape == (4, 6)
    model, preprocess, tokenizer = load_open_clip("ViT-H-14", model_config=arch, pretrained=weights)
    assert model.visual.patch_size == (14, 14) and model.context_length == 77
    images = torch.stack([preprocess(Image.open(p).convert("RGB")) for p in paths])
    with torch.no_grad():
        out = model(images, tokenizer(texts))
    img, txt = (out["image_features"], out["text_features"]) if isinstance(out, dict) else out[:2]
    np.testing.assert_allclose(scores["ImageBind"], (img @ txt.T).numpy(), atol=1e-5)


def test_imagebind_must_be_vit_h14():
    with pytest.raises(ValueError, match="OpenCLIP ViT-H-14"):
        ZeroShotSection(row="ImageBind", family="imagebind", path="/models/vit-b.bin")
    assert ZeroShotSection(row="ImageBind", family="imagebind", model_name="ViT-H-14", path="x").path == "x"
