"""The weightless production-shaped model directory: BGE-VL-MLLM-S1's parameter count and tiling."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def test_production_shaped_dir_has_bgevl_dimensions_and_no_weights(tmp_path):
    from PIL import Image
    from transformers import AutoProcessor, LlavaNextConfig, LlavaNextForConditionalGeneration

    from training.dryrun.production_shape import write_production_shaped_dir

    out = write_production_shaped_dir(tmp_path / "bgevl", ["a photo of a cat on a mat"])
    assert not list(out.glob("*.safetensors")) and (out / "config.json").exists()
    config = LlavaNextConfig.from_pretrained(out)
    with torch.device("meta"):  # shapes only: nothing allocated
        model = LlavaNextForConditionalGeneration(config)
    # issue 31: LLaVA-NeXT, Mistral-7B, CLIP ViT-L/14-336 = 7.57B parameters
    assert sum(p.numel() for p in model.parameters()) / 1e9 == pytest.approx(7.57, abs=0.005)
    processor = AutoProcessor.from_pretrained(out)
    enc = processor(text=["<image>"], images=[Image.new("RGB", (512, 512))], return_tensors="pt")
    # a 512 px image: 672x672 grid = 4 tiles + the base image, 576 + 48 x (48 + 1) = 2,928 tokens
    assert int((enc["input_ids"] == config.image_token_index).sum()) == 2928
    assert tuple(enc["pixel_values"].shape) == (1, 5, 3, 336, 336)
