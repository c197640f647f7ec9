"""Tiny random-weight IMP dual encoders (AltCLIP, ALIGN, GroupViT, BLIP, FLAVA) saved like checkpoints.

`materialize_tiny_dual_encoder(family, out_dir, texts)` writes the family's transformers class
(the one `training.baselines.hf_dual_encoders.DUAL_ENCODER_CLASSES` loads; named again here
because dryrun imports nothing from baselines) with a few-hundred-token BPE
tokenizer trained on `texts` and the family's own image processor at 32 px, so
`load_hf_zero_shot(family, out_dir)` reads it like the real checkpoint. Nothing is downloaded.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from training.dryrun.zero_shot import _VISION, IMAGE_SIZE, _tokenizer

_LAYER = {"hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 1, "num_attention_heads": 2}
_PX = {"height": IMAGE_SIZE, "width": IMAGE_SIZE}


def _text(tok: Any, **extra: Any) -> dict[str, Any]:
    return {**_LAYER, "vocab_size": len(tok), "max_position_embeddings": 40, "pad_token_id": tok.pad_token_id,
            **extra}  # fmt: skip


def _tiny_efficientnet() -> dict[str, Any]:
    # two MBConv stages ending at 32 channels: ALIGN's image embedding is the pooled last stage
    return {"image_size": IMAGE_SIZE, "width_coefficient": 1.0, "depth_coefficient": 1.0,
            "kernel_sizes": [3, 3], "in_channels": [32, 16], "out_channels": [16, 32], "strides": [1, 2],
            "num_block_repeats": [1, 1], "expand_ratios": [1, 2], "depthwise_padding": [], "hidden_dim": 32}  # fmt: skip


def _config_and_processor(family: str, tok: Any) -> tuple[Any, Any, Any]:
    """(model class, tiny config, image processor) of a family."""
    import transformers as tf

    if family == "altclip":
        config = tf.AltCLIPConfig(
            text_config=_text(tok, project_dim=16), vision_config=_VISION, projection_dim=16
        )
        return (
            tf.AltCLIPModel,
            config,
            tf.CLIPImageProcessor(size={"shortest_edge": IMAGE_SIZE}, crop_size=_PX),
        )
    if family == "align":
        config = tf.AlignConfig(text_config=_text(tok), vision_config=_tiny_efficientnet(), projection_dim=32)
        return (
            tf.AlignModel,
            config,
            tf.EfficientNetImageProcessor(size=_PX, crop_size=_PX, do_center_crop=False),
        )
    if family == "groupvit":
        vision = {**_VISION, "depths": [1, 1], "num_hidden_layers": 2, "num_group_tokens": [4, 0],
                  "num_output_groups": [4, 4]}  # fmt: skip
        text = _text(tok, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
        config = tf.GroupViTConfig(
            text_config=text, vision_config=vision, projection_dim=16, projection_intermediate_dim=32
        )
        return (
            tf.GroupViTModel,
            config,
            tf.CLIPImageProcessor(size={"shortest_edge": IMAGE_SIZE}, crop_size=_PX),
        )
    if family == "blip":
        text = _text(tok, encoder_hidden_size=_VISION["hidden_size"], bos_token_id=tok.bos_token_id)
        config = tf.BlipConfig(text_config=text, vision_config=_VISION, image_text_hidden_size=16)
        return tf.BlipForImageTextRetrieval, config, tf.BlipImageProcessor(size=_PX)
    if family == "flava":
        config = tf.FlavaConfig(
            image_config=_VISION,
            text_config=_text(tok),
            multimodal_config=_LAYER,
            projection_dim=16,
            hidden_size=32,
        )
        return tf.FlavaModel, config, tf.FlavaImageProcessor(size=_PX, crop_size=_PX)
    raise ValueError(f"no tiny builder for family {family!r}")


def materialize_tiny_dual_encoder(
    family: str, out_dir: str | Path, texts: Iterable[str], seed: int = 0
) -> Path:
    """A tiny random `family` model, its tokenizer and image processor saved into out_dir."""
    import torch

    out = Path(out_dir)
    tok = _tokenizer(texts, append_eos=family == "groupvit")  # GroupViT pools its EOS token, like CLIP
    model_class, config, processor = _config_and_processor(family, tok)
    torch.manual_seed(seed)
    model_class(config).save_pretrained(out)
    tok.save_pretrained(out)
    processor.save_pretrained(out)
    return out
