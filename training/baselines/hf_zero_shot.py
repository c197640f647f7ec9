"""Zero-shot baselines of main Tables 2 and 5 loaded with `transformers` from local directories.

Families (the checkpoints meant are listed in docs/evaluation.md):
- `blip2`: `Blip2ForImageTextRetrieval` (Salesforce/blip2-itm-vit-g). Image-text contrastive
  score of BLIP-2: the Q-Former's query outputs of an image (projected, unit-norm, one per query
  token) against the projected [CLS] output of the caption; the score is the maximum cosine over
  the queries, exactly what the model's `use_image_text_matching_head=False` forward returns.
- `hf_clip`: a `CLIPModel` (BAAI/BGE-VL-large, BAAI/BGE-VL-base are CLIP models; their remote
  code only wraps `get_image_features`/`get_text_features`), scored by cosine.
- `altclip`, `align`, `groupvit`, `blip`, `flava`: IMP's other rows (seed 003), scored by cosine;
  their classes and embeddings are in `training.baselines.hf_dual_encoders`.
- `vlm2vec_phi3` is **unavailable**: TIGER-Lab/VLM2Vec-Full (the VLM2Vec paper's model) is
  Phi-3.5-V, whose modeling code is remote code (`trust_remote_code`) that transformers does not
  ship, so it can be neither loaded from a plain checkpoint nor built tiny offline. (Jina-v4 is
  assembled from Qwen2.5-VL in `training.baselines.jina_v4`.)

Nothing is downloaded: paths must be local directories (`local_files_only`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from training.baselines.global_only import global_scores
from training.baselines.hf_dual_encoders import (
    DUAL_ENCODER_CLASSES,
    default_text_tokens,
    dual_encoder_class,
    dual_image_features,
    dual_text_features,
)

UNAVAILABLE_FAMILIES = {
    "vlm2vec_phi3": "TIGER-Lab/VLM2Vec-Full is Phi-3.5-V, whose modeling code is remote code "
    "(trust_remote_code) that transformers does not ship; it cannot be loaded from local files or "
    "built tiny offline (TIGER-Lab/VLM2Vec-LLaVa-Next runs as family vlm2vec_llava_next)",
}


class ZeroShotUnavailable(RuntimeError):
    """A baseline family the code cannot run; its rows are reported as unavailable."""


@dataclass
class HFZeroShot:
    family: str
    model: Any
    tokenizer: Any
    image_processor: Any
    max_text_tokens: int
    device: torch.device


def load_hf_zero_shot(family: str, path: str, *, device: str = "cpu", max_text_tokens: int | None = None):
    """Model, tokenizer and image processor of `family` from the local directory `path`."""
    if family in UNAVAILABLE_FAMILIES:
        raise ZeroShotUnavailable(f"{family}: {UNAVAILABLE_FAMILIES[family]}")
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(
            f"{family} baseline: model directory not found: {root} (nothing is downloaded)"
        )
    from transformers import AutoImageProcessor, AutoTokenizer

    if family == "blip2":
        from transformers import Blip2ForImageTextRetrieval as cls

        default_len = 35  # LAVIS' max_txt_len for BLIP-2 retrieval
    elif family == "hf_clip":
        from transformers import CLIPModel as cls

        default_len = None
    elif family in DUAL_ENCODER_CLASSES:
        cls, default_len = dual_encoder_class(family), None
    else:
        raise ValueError(
            f"unknown transformers zero-shot family {family!r}; expected blip2, hf_clip or one of "
            f"{sorted(DUAL_ENCODER_CLASSES)}"
        )
    model = cls.from_pretrained(str(root), local_files_only=True).to(device).eval()
    if default_len is None:
        default_len = default_text_tokens(family, model.config)
    return HFZeroShot(
        family,
        model,
        AutoTokenizer.from_pretrained(str(root), local_files_only=True),
        AutoImageProcessor.from_pretrained(str(root), local_files_only=True),
        int(max_text_tokens or default_len),
        torch.device(device),
    )


def rgb_images(paths: Sequence[str]) -> list[Any]:
    """The images at `paths` as RGB PIL images, each file closed once read (the processors' input)."""
    from PIL import Image

    images = []
    for path in paths:
        with Image.open(path) as im:
            images.append(im.convert("RGB"))
    return images


def _pixels(bundle: HFZeroShot, paths: Sequence[str]) -> torch.Tensor:
    images = rgb_images(paths)
    return bundle.image_processor(images=images, return_tensors="pt")["pixel_values"].to(bundle.device)


def _tokens(bundle: HFZeroShot, texts: Sequence[str]) -> dict[str, torch.Tensor]:
    enc = bundle.tokenizer(
        list(texts), padding=True, truncation=True, max_length=bundle.max_text_tokens, return_tensors="pt"
    )
    return {
        "input_ids": enc["input_ids"].to(bundle.device),
        "attention_mask": enc["attention_mask"].to(bundle.device),
    }


def _blip2_images(model, pixel_values: torch.Tensor) -> torch.Tensor:
    """[B, Q, d] unit-norm projected Q-Former query outputs (the ITC image side of BLIP-2)."""
    image_embeds = model.vision_model(pixel_values=pixel_values).last_hidden_state
    mask = torch.ones(image_embeds.shape[:-1], dtype=torch.long, device=image_embeds.device)
    queries = model.query_tokens.expand(image_embeds.shape[0], -1, -1)
    out = model.qformer(query_embeds=queries, encoder_hidden_states=image_embeds, encoder_attention_mask=mask)
    states = out.last_hidden_state.to(model.vision_projection.weight.dtype)
    return F.normalize(model.vision_projection(states), dim=-1)


def _blip2_texts(model, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """[B, d] unit-norm projected [CLS] output of the Q-Former's text side."""
    out = model.qformer(
        query_embeds=model.embeddings(input_ids=input_ids), query_length=0, attention_mask=attention_mask
    )
    cls_state = out.last_hidden_state[:, 0, :].to(model.text_projection.weight.dtype)
    return F.normalize(model.text_projection(cls_state), dim=-1)


def _features(output) -> torch.Tensor:
    # transformers 5 returns a model output whose pooler_output is the projected feature
    return output if isinstance(output, torch.Tensor) else output.pooler_output


@torch.no_grad()
def encode_hf_images(bundle: HFZeroShot, paths: Sequence[str], batch_size: int = 32) -> torch.Tensor:
    """Unit-norm image embeddings on CPU: [n, d] (hf_clip, IMP families) or [n, Q, d] (blip2)."""
    parts = []
    for i in range(0, len(paths), batch_size):
        px = _pixels(bundle, paths[i : i + batch_size])
        if bundle.family == "blip2":
            parts.append(_blip2_images(bundle.model, px).float().cpu())
        elif bundle.family in DUAL_ENCODER_CLASSES:
            feats = dual_image_features(bundle.family, bundle.model, px)
            parts.append(F.normalize(feats.float(), dim=-1).cpu())
        else:
            parts.append(
                F.normalize(_features(bundle.model.get_image_features(pixel_values=px)).float(), dim=-1).cpu()
            )
    return torch.cat(parts)


@torch.no_grad()
def encode_hf_texts(bundle: HFZeroShot, texts: Sequence[str], batch_size: int = 64) -> torch.Tensor:
    """Unit-norm text embeddings [m, d] on CPU."""
    parts = []
    for i in range(0, len(texts), batch_size):
        tok = _tokens(bundle, texts[i : i + batch_size])
        if bundle.family == "blip2":
            parts.append(_blip2_texts(bundle.model, **tok).float().cpu())
        elif bundle.family in DUAL_ENCODER_CLASSES:
            parts.append(
                F.normalize(dual_text_features(bundle.family, bundle.model, **tok).float(), dim=-1).cpu()
            )
        else:
            parts.append(F.normalize(_features(bundle.model.get_text_features(**tok)).float(), dim=-1).cpu())
    return torch.cat(parts)


@torch.no_grad()
def multi_query_scores(img: torch.Tensor, txt: torch.Tensor, *, image_chunk: int = 64) -> np.ndarray:
    """BLIP-2 ITC: max over an image's query embeddings [n, Q, d] of the cosine with each text [m, d]."""
    out = np.empty((img.shape[0], txt.shape[0]), dtype=np.float32)
    t = txt.float()
    for i0 in range(0, img.shape[0], image_chunk):
        block = torch.einsum("bqd,md->bqm", img[i0 : i0 + image_chunk].float(), t)
        out[i0 : i0 + image_chunk] = block.amax(dim=1).numpy()
    return out


def hf_zero_shot_scores(
    bundle: HFZeroShot, image_paths: Sequence[str], texts: Sequence[str], *, batch_size: int = 32
) -> np.ndarray:
    """[n_images, n_texts] float32 scores of a transformers zero-shot baseline."""
    img = encode_hf_images(bundle, image_paths, batch_size)
    txt = encode_hf_texts(bundle, texts, 2 * batch_size)
    return multi_query_scores(img, txt) if img.dim() == 3 else global_scores(img, txt)
