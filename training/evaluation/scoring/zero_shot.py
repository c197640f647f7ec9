"""Zero-shot baseline rows of main Tables 2 and 5 from `baselines.zero_shot` entries.

Each entry names its paper row (`row`) and a family:
- `open_clip` (CLIP, OpenCLIP, CoCa, SigLIP-2 of open_clip): `training.baselines.open_clip`;
- `imagebind` (IMP Tables 3-5): ImageBind's image and text encoders are OpenCLIP ViT-H-14
  (laion2b) initialised and frozen, so it is that open_clip model (docs/evaluation.md says what
  differs);
- `jina_v4`: Qwen2.5-VL with the retrieval adapter merged, mean-pooled: `training.baselines.jina_v4`;
- `vlm2vec_llava_next` (supp. Tables 1-2's VLM2Vec): last-token LLaVA-Next: `training.baselines.vlm2vec`;
- `blip2`, `hf_clip` (BGE-VL-Large), the IMP dual encoders, `vlm2vec_phi3` (unavailable):
  `training.baselines.hf_zero_shot`;
- `bge_vl_mllm`: BAAI/BGE-VL-MLLM-S1 itself, untouched (LoRA adapters start at zero), read
  through the project's retriever in global mode: the global embedding is the final token of
  the global-only input strings of docs/training.md (the instruction texts of `train_config`'s
  data section), the same inputs the fine-tuned BGE-VL-MLLM baseline is trained with.

`zero_shot_systems` returns the score matrices of the rows it can run and, for the others, the
reason (never a made-up number).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import torch

from training.evaluation.config import ZeroShotSection

log = logging.getLogger(__name__)


@torch.no_grad()
def global_mode_scores(
    retriever, processor, data_cfg, image_paths: Sequence[str], texts: Sequence[str], batch_size: int = 8
) -> np.ndarray:
    """Cosine of global embeddings from the global-only input strings (no prompts, no lens tags)."""
    from training.baselines.global_only import global_scores
    from training.loop.inputs import Collator

    retriever.eval()
    collator = Collator(processor, data_cfg, lens_mode=False)
    dev, bs = next(retriever.parameters()).device, batch_size
    img = image_globals_without_prompts(retriever, collator, data_cfg, image_paths, bs)
    txt = []
    for i in range(0, len(texts), 4 * bs):
        t = collator.captions(list(texts[i : i + 4 * bs]))
        e = retriever.encode_captions(t["txt_input_ids"].to(dev), t["txt_attention_mask"].to(dev))
        txt.append(e.global_.cpu())
    return global_scores(img, torch.cat(txt))


@torch.no_grad()
def image_globals_without_prompts(
    retriever, collator, data_cfg, image_paths: Sequence[str], batch_size: int = 8
) -> torch.Tensor:
    """Global image embeddings of images given no prompts, [N, D] on the CPU."""
    from training.loop.data import load_image

    dev, out = next(retriever.parameters()).device, []
    for i in range(0, len(image_paths), batch_size):
        pils = [load_image(p, data_cfg.image_size) for p in image_paths[i : i + batch_size]]
        b = collator.images(pils, [[] for _ in pils])
        e = retriever.encode_images(
            b["img_input_ids"].to(dev), b["img_attention_mask"].to(dev), b["pixel_values"].to(dev),
            b["image_sizes"].to(dev), b["img_slot_lens"].to(dev),
        )  # fmt: skip
        out.append(e.global_.cpu())
    return torch.cat(out)


def bge_vl_mllm_scores(
    entry: ZeroShotSection, image_paths: Sequence[str], texts: Sequence[str]
) -> np.ndarray:
    """BGE-VL-MLLM-S1 as it is: the retriever in global mode straight from the base directory."""
    from training.retriever.build import build_retriever
    from training.retriever.config import load_train_config

    cfg = load_train_config(
        entry.train_config,
        {"loss": {"mode": "global"}, "model": {"source": "local", "path": entry.path},
         "run": {"device": entry.device, "precision": "fp32"}},
    )  # fmt: skip
    retriever, processor, _ = build_retriever(cfg, entry.path, torch.device(entry.device))
    return global_mode_scores(retriever, processor, cfg.data, image_paths, texts, entry.batch_size)


def _open_clip_scores(entry: ZeroShotSection, image_paths: Sequence[str], texts: Sequence[str]) -> np.ndarray:
    from training.baselines.global_only import global_scores
    from training.baselines.open_clip import encode_open_clip, load_open_clip

    bundle = load_open_clip(
        entry.model_name, pretrained=entry.path, model_config=entry.model_config_path, device=entry.device
    )
    return global_scores(*encode_open_clip(*bundle, image_paths, texts, batch_size=entry.batch_size))


def zero_shot_scores(entry: ZeroShotSection, image_paths: Sequence[str], texts: Sequence[str]) -> np.ndarray:
    """[n_images, n_texts] scores of one entry; ZeroShotUnavailable for a family that cannot run."""
    from training.baselines.hf_zero_shot import hf_zero_shot_scores, load_hf_zero_shot

    if entry.family in ("open_clip", "imagebind"):
        return _open_clip_scores(entry, image_paths, texts)
    if entry.family == "jina_v4":
        from training.baselines.jina_v4 import jina_v4_scores

        return jina_v4_scores(
            entry.path, image_paths, texts, device=entry.device, batch_size=entry.batch_size
        )
    if entry.family == "vlm2vec_llava_next":
        from training.baselines.vlm2vec import vlm2vec_scores

        return vlm2vec_scores(
            entry.path, image_paths, texts, device=entry.device, batch_size=entry.batch_size
        )
    if entry.family == "bge_vl_mllm":
        return bge_vl_mllm_scores(entry, image_paths, texts)
    bundle = load_hf_zero_shot(
        entry.family, entry.path, device=entry.device, max_text_tokens=entry.max_text_tokens
    )
    return hf_zero_shot_scores(bundle, image_paths, texts, batch_size=entry.batch_size)


def zero_shot_systems(
    entries: Sequence[ZeroShotSection], image_paths: Sequence[str], texts: Sequence[str]
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """({row: scores} of the runnable entries, {row: reason} of the unavailable ones)."""
    from training.baselines.hf_zero_shot import ZeroShotUnavailable

    scores: dict[str, np.ndarray] = {}
    unavailable: dict[str, str] = {}
    for entry in entries:
        try:
            scores[entry.row] = zero_shot_scores(entry, image_paths, texts)
        except ZeroShotUnavailable as exc:
            log.warning("zero-shot row %r unavailable: %s", entry.row, exc)
            unavailable[entry.row] = str(exc)
    return scores, unavailable
