"""A weightless model directory with BGE-VL-MLLM-S1's dimensions, for rehearsing at production size.

`lenses train --rehearse` needs only a model directory's config.json and processor. Where the real
BGE-VL-MLLM-S1 directory is not at hand (a borrowed GPU, CI), this writes one with its shapes:
LLaVA-NeXT on Mistral-7B (hidden 4096, MLP 14336, 32 layers, 32 heads / 8 KV heads, 32,064 rows)
and CLIP ViT-L/14-336 (hidden 1024, 24 layers), the anyres pinpoints of llava-v1.6-mistral-7b, its
base: 7.57B parameters, and a 512 px image becomes 2,928 image tokens, as with the real processor.
The tokenizer is the tiny one trained locally on the given texts (the real one is not downloaded),
so a prompt of N tokens is N tokens of this tokenizer: the rehearsal's shapes are set in tokens.
No weights are written; the rehearsal builds them at random on the device.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from training.dryrun.tiny import build_tiny_tokenizer

PINPOINTS = [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def production_config(image_token_id: int, pad_id: int, bos_id: int, eos_id: int):
    from transformers import CLIPVisionConfig, LlavaNextConfig, MistralConfig

    vision = CLIPVisionConfig(
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=24,
        num_attention_heads=16,
        image_size=336,
        patch_size=14,
        projection_dim=768,
    )
    text = MistralConfig(
        vocab_size=32064,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=32768,
        rope_theta=1e6,
        rms_norm_eps=1e-5,
        pad_token_id=pad_id,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
    )
    return LlavaNextConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=image_token_id,
        image_grid_pinpoints=PINPOINTS,
        image_seq_length=576,
        vision_feature_select_strategy="default",
        vision_feature_layer=-2,
    )


def write_production_shaped_dir(out_dir: str | Path, texts: Iterable[str] = ()) -> Path:
    """config.json + processor (no weights) in `out_dir`; returns it."""
    from transformers import LlavaNextImageProcessor, LlavaNextProcessor

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tiny_tokenizer(texts, 4000)
    image_processor = LlavaNextImageProcessor(
        size={"shortest_edge": 336},
        crop_size={"height": 336, "width": 336},
        image_grid_pinpoints=PINPOINTS,
        image_mean=CLIP_MEAN,
        image_std=CLIP_STD,
    )
    processor = LlavaNextProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=14,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
    )
    ids = (tokenizer.convert_tokens_to_ids("<image>"), tokenizer.pad_token_id)
    production_config(*ids, tokenizer.bos_token_id, tokenizer.eos_token_id).save_pretrained(out)
    processor.save_pretrained(out)
    return out
