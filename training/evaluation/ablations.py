"""Baselines and ablations: zero-shot open_clip, global-only scoring, similarity ablations on
fixed embeddings (supplementary Table 3) and text-only prompt<->caption retrieval (Table 3b).

Every scorer returns a float32 numpy [n_images, n_texts] matrix for `training.metrics`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F

from training.metrics import grouped_retrieval_metrics
from training.scoring import all_lens_text_slots, score_lens_slots, text_active

SimilarityVariant = Literal["global", "no_mask", "lens_masked", "lens_masked_global"]
SIMILARITY_VARIANTS: tuple[str, ...] = ("global", "no_mask", "lens_masked", "lens_masked_global")


@torch.no_grad()
def global_scores(
    img_global: torch.Tensor, txt_global: torch.Tensor, *, image_chunk: int = 1024
) -> np.ndarray:
    """Cosine of global embeddings (zero-shot CLIP style and the global-only fine-tuned model)."""
    gu = F.normalize(torch.as_tensor(txt_global).float(), dim=-1)
    out = np.empty((len(img_global), len(gu)), dtype=np.float32)
    for i0 in range(0, len(img_global), image_chunk):
        gv = F.normalize(torch.as_tensor(img_global[i0 : i0 + image_chunk]).float(), dim=-1)
        out[i0 : i0 + image_chunk] = (gv @ gu.T).numpy()
    return out


@torch.no_grad()
def no_mask_scores(
    img_slots: torch.Tensor,
    img_slot_lens: torch.Tensor,
    img_global: torch.Tensor,
    txt_slots: torch.Tensor,
    txt_global: torch.Tensor,
    *,
    txt_slot_lens: torch.Tensor | None = None,
    alpha: float = 16.0,
    denominator: float = 2.0,
    image_chunk: int = 128,
    text_chunk: int = 1024,
) -> np.ndarray:
    """Smooth Chamfer over all active slots, ignoring lens labels ("No-mask" of Table 3).

    Pairs with no active slot on either side use the global cosine, as the full model does.
    """
    n_txt = txt_slots.shape[0]
    active = text_active(all_lens_text_slots(n_txt) if txt_slot_lens is None else txt_slot_lens)
    out = np.empty((img_slots.shape[0], n_txt), dtype=np.float32)
    gu_all = F.normalize(txt_global.float(), dim=-1)
    for i0 in range(0, img_slots.shape[0], image_chunk):
        sl = slice(i0, i0 + image_chunk)
        img_on = img_slot_lens[sl].long() >= 0  # [b, S]
        v = F.normalize(img_slots[sl].float(), dim=-1)
        n_img_slots = img_on.sum(1).float()
        gv = F.normalize(img_global[sl].float(), dim=-1)
        for t0 in range(0, n_txt, text_chunk):
            tl = slice(t0, t0 + text_chunk)
            act = active[tl]  # [c, 5]
            u = F.normalize(txt_slots[tl].float(), dim=-1)
            both = img_on[:, :, None, None] & act[None, None]  # [b, S, c, 5]
            logits = (alpha * torch.einsum("bsd,cjd->bscj", v, u)).masked_fill_(~both, -torch.inf)
            # Image side: per active image slot, logsumexp over the caption's active slots.
            per_slot = torch.logsumexp(logits, dim=3)  # [b, S, c]
            per_slot = torch.where(both.any(3), per_slot, torch.zeros_like(per_slot))
            side_img = per_slot.sum(1) / n_img_slots.clamp(min=1)[:, None]
            # Text side: per active text slot, logsumexp over the image's active slots.
            per_txt = torch.logsumexp(logits, dim=1)  # [b, c, 5]
            per_txt = torch.where(both.any(1), per_txt, torch.zeros_like(per_txt))
            side_txt = per_txt.sum(2) / act.sum(1).clamp(min=1)[None]
            chamfer = (side_img + side_txt) / (alpha * denominator)
            has_any = (n_img_slots > 0)[:, None] & act.any(1)[None]
            out[sl, tl] = torch.where(has_any, chamfer, gv @ gu_all[tl].T).numpy()
    return out


def similarity_ablation_scores(
    variant: SimilarityVariant,
    img_slots: torch.Tensor,
    img_slot_lens: torch.Tensor,
    img_global: torch.Tensor,
    txt_slots: torch.Tensor,
    txt_global: torch.Tensor,
    *,
    alpha: float = 16.0,
    denominator: float = 2.0,
) -> np.ndarray:
    """Scores of one similarity variant on fixed embeddings (all five text slots active)."""
    if variant == "global":
        return global_scores(img_global, txt_global)
    if variant == "no_mask":
        return no_mask_scores(
            img_slots, img_slot_lens, img_global, txt_slots, txt_global, alpha=alpha, denominator=denominator
        )
    if variant in ("lens_masked", "lens_masked_global"):
        return score_lens_slots(
            img_slots,
            img_slot_lens,
            img_global,
            txt_slots,
            txt_global,
            alpha=alpha,
            denominator=denominator,
            fallback=variant == "lens_masked_global",
        )
    raise ValueError(f"unknown similarity variant {variant!r}; expected one of {SIMILARITY_VARIANTS}")


def text_only_retrieval(
    prompt_emb: Any,
    prompt_image: Sequence,
    prompt_lens: Sequence,
    caption_emb: Any,
    caption_image: Sequence,
    caption_lens: Sequence,
    *,
    ks: Sequence[int] = (1, 5, 10),
) -> dict[str, float]:
    """Prompt->caption (P2C) and caption->prompt (C2P) retrieval without images (Table 3b).

    A prompt and a caption match when they belong to the same image and the same lens; scores
    are cosines of the two texts' embeddings. Keys: `P2C/R@K`, `C2P/R@K`, meanR, medR, mAP@R.
    """
    sim = global_scores(torch.as_tensor(prompt_emb), torch.as_tensor(caption_emb))
    p_key = np.char.add(
        np.asarray(prompt_image, dtype=str), np.char.add("|", np.asarray(prompt_lens, dtype=str))
    )
    c_key = np.char.add(
        np.asarray(caption_image, dtype=str), np.char.add("|", np.asarray(caption_lens, dtype=str))
    )
    out: dict[str, float] = {}
    for name, matrix, q, g in (("P2C", sim, p_key, c_key), ("C2P", sim.T, c_key, p_key)):
        for key, value in grouped_retrieval_metrics(matrix, q, g, ks=ks).items():
            out[f"{name}/{key}"] = value
    return out


def load_open_clip(
    model_name: str,
    *,
    pretrained: str | None = None,
    model_config: str | None = None,
    device: str = "cpu",
):
    """(model, preprocess, tokenizer) of an open_clip model from local files only.

    `pretrained` must be a local checkpoint file (nothing is downloaded) or None for random
    weights; `model_config` is an optional JSON architecture file registered under its stem.
    """
    import open_clip

    if model_config is not None:
        cfg = Path(model_config)
        if not cfg.is_file():
            raise FileNotFoundError(f"open_clip model config not found: {cfg}")
        open_clip.add_model_config(cfg)
        model_name = cfg.stem
    if pretrained is not None and not Path(pretrained).is_file():
        raise FileNotFoundError(
            f"pretrained must be a local open_clip checkpoint file; not found: {pretrained}"
        )
    model, _, preprocess = open_clip.create_model_and_transforms(
        model_name, pretrained=pretrained, device=device, pretrained_text=False
    )
    model.eval()
    return model, preprocess, open_clip.get_tokenizer(model_name)


@torch.no_grad()
def encode_open_clip(
    model, preprocess, tokenizer, image_paths: Sequence[str], texts: Sequence[str], *, batch_size: int = 64
) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit-norm image and text embeddings from an open_clip model."""
    from PIL import Image

    device = next(model.parameters()).device
    images = []
    for i in range(0, len(image_paths), batch_size):
        batch = []
        for path in image_paths[i : i + batch_size]:
            with Image.open(path) as im:
                batch.append(preprocess(im.convert("RGB")))
        images.append(model.encode_image(torch.stack(batch).to(device)).float().cpu())
    txt = [
        model.encode_text(tokenizer(list(texts[i : i + batch_size])).to(device)).float().cpu()
        for i in range(0, len(texts), batch_size)
    ]
    return F.normalize(torch.cat(images), dim=-1), F.normalize(torch.cat(txt), dim=-1)
