"""IMP's dual-encoder and fusion rows (seed 003, Tables 3-5) loaded with `transformers`.

IMP scores these models zero-shot "using the pre-trained weights provided by Huggingface"
(seed 003, App. "Implementation details"); every one has a transformers class, so each row is a
`baselines.zero_shot` family read from a local directory and scored by the cosine of one image
and one text embedding, like the CLIP rows:

| family | class | embedding (image / text) |
|---|---|---|
| `altclip` | `AltCLIPModel` (BAAI/AltCLIP) | projected pooled vision output / projected [CLS] of the XLM-R text side |
| `align` | `AlignModel` (kakaobrain/align-base) | pooled EfficientNet output / projected [CLS] of BERT |
| `groupvit` | `GroupViTModel` (nvidia/groupvit-gcc-yfcc) | projected pooled group tokens / projected EOS state |
| `blip` | `BlipForImageTextRetrieval` (Salesforce/blip-itm-*-coco) | BLIP's ITC features: `vision_proj` of the image [CLS], `text_proj` of the unimodal text [CLS] |
| `flava` | `FlavaModel` (facebook/flava-full) | projected [CLS] of the image encoder / of the text encoder (FLAVA's contrastive pair) |

BLIP's score is its image-text contrastive score (the model's `use_itm_head=False` output), not
the ITM head, so it ranks a whole gallery like the other dual encoders. The functions return
unnormalised features; `training.baselines.hf_zero_shot` normalises and scores them.
"""

from __future__ import annotations

from typing import Any

import torch

DUAL_ENCODER_CLASSES = {
    "altclip": "AltCLIPModel",
    "align": "AlignModel",
    "groupvit": "GroupViTModel",
    "blip": "BlipForImageTextRetrieval",
    "flava": "FlavaModel",
}


def dual_encoder_class(family: str) -> type:
    """The transformers class of an IMP family (KeyError for any other family)."""
    import transformers

    return getattr(transformers, DUAL_ENCODER_CLASSES[family])


def default_text_tokens(family: str, config: Any) -> int:
    """Longest caption (in tokens) the family's text encoder takes: its position table."""
    text = config.text_config
    if family == "altclip":  # RoBERTa positions start after the padding index (XLM-R: 514 -> 512)
        return int(text.max_position_embeddings) - int(text.pad_token_id) - 1
    return int(text.max_position_embeddings)


def _pooled(output: Any) -> torch.Tensor:
    # transformers 5: get_*_features return a model output whose pooler_output is the projection
    return output if isinstance(output, torch.Tensor) else output.pooler_output


def dual_image_features(family: str, model: Any, pixel_values: torch.Tensor) -> torch.Tensor:
    """[B, 3, H, W] pixels -> [B, d] image embeddings (not normalised)."""
    if family == "blip":
        states = model.vision_model(pixel_values=pixel_values).last_hidden_state  # [B, 1 + P, h]
        return model.vision_proj(states[:, 0, :])
    feats = _pooled(model.get_image_features(pixel_values=pixel_values))
    return feats[:, 0, :] if family == "flava" else feats  # FLAVA projects every token: [B, 1 + P, d]


def dual_text_features(
    family: str, model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """[B, T] token ids -> [B, d] text embeddings (not normalised)."""
    if family == "blip":  # unimodal text encoder (no image cross-attention), as BLIP's ITC
        states = model.text_encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return model.text_proj(states[:, 0, :])  # [B, T, h] -> [B, d]
    feats = _pooled(model.get_text_features(input_ids=input_ids, attention_mask=attention_mask))
    return feats[:, 0, :] if family == "flava" else feats  # FLAVA: [B, T, d] -> [CLS]
