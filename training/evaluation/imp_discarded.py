"""Scores of the discarded captions with their own image, per system: IMP's AUPRC negatives.

IMP (seed 003) classifies true pairs against "one true negative for each image", captions its
annotators rejected for that image. Our analogue is a caption of the same image that a validator
discarded (`training.evaluation.inputs.discarded_captions`). Each system scores only those
(image, discarded caption) pairs, never a full matrix. A system without a scorer here gets no
entry, and `imp_metrics` falls back to the shifted negatives for it (counted per system).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from training.evaluation.config import EvalConfig
from training.evaluation.imp_metrics import imp_metrics
from training.evaluation.scoring import all_lens_text_slots, label_text_slots, score_lens_slots
from training.evaluation.types import DiscardedTexts, EncodedSplit, SplitLabels

log = logging.getLogger(__name__)
PAIR_CHUNK = 256


def lens_pair_scores(
    enc: EncodedSplit,
    image: np.ndarray,
    txt_slots: torch.Tensor,
    txt_global: torch.Tensor,
    txt_slot_lens: torch.Tensor,
    cfg: EvalConfig,
) -> np.ndarray:
    """[k] Eq. 4 score of text t with image image[t]: the diagonal of per-chunk score blocks.

    image [k]; txt_slots [k, 5, d]; txt_global [k, d]; txt_slot_lens [k, 5].
    """
    s = cfg.scoring
    out = np.empty(len(image), np.float32)
    for start in range(0, len(image), PAIR_CHUNK):
        rows = torch.as_tensor(image[start : start + PAIR_CHUNK], dtype=torch.long)
        part = slice(start, start + len(rows))
        block = score_lens_slots(
            enc.img_slots[rows], enc.img_slot_lens[rows], enc.img_global[rows], txt_slots[part],
            txt_global[part], txt_slot_lens=txt_slot_lens[part], alpha=s.alpha,
            denominator=s.denominator, fallback=s.fallback,
        )  # fmt: skip
        out[part] = np.diagonal(block)
    return out


def _lens_model(cfg: EvalConfig, enc: EncodedSplit, discarded: DiscardedTexts, checkpoint: str) -> np.ndarray:
    from training.evaluation.encode import load_for_inference
    from training.evaluation.inputs import encode_texts
    from training.loop.inputs import Collator

    retriever, processor, tcfg = load_for_inference(checkpoint, torch.device("cpu"))
    retriever.eval()
    slots, glob = encode_texts(retriever, Collator(processor, tcfg.data, lens_mode=True), discarded.texts)
    n = len(discarded.texts)
    mask = all_lens_text_slots(n) if cfg.scoring.text_slots == "all" else label_text_slots(discarded.lens)
    return lens_pair_scores(enc, discarded.image, slots, glob, mask, cfg)


def _open_clip(bundle: Any, cfg: EvalConfig, labels: SplitLabels, discarded: DiscardedTexts) -> np.ndarray:
    from training.baselines.open_clip import encode_open_clip

    paths = [labels.image_paths[i] for i in discarded.image]
    img, txt = encode_open_clip(
        *bundle, paths, discarded.texts, batch_size=cfg.baselines.open_clip.batch_size
    )
    return (F.normalize(img.float(), dim=-1) * F.normalize(txt.float(), dim=-1)).sum(-1).numpy()


def discarded_pair_scores(
    cfg: EvalConfig,
    labels: SplitLabels,
    discarded: DiscardedTexts,
    enc: EncodedSplit,
    checkpoint: str | None,
    systems: dict[str, Any],
) -> dict[str, np.ndarray]:
    """{system: [k] scores of the discarded captions with their images} for the systems that can
    encode new texts: the lens model (from its checkpoint) and zero-shot open_clip.

    systems: {name: ("lens", None) | ("open_clip", bundle)}.
    """
    if not discarded.texts:
        return {}
    out: dict[str, np.ndarray] = {}
    for name, (kind, bundle) in systems.items():
        if kind == "lens" and checkpoint is not None:
            out[name] = _lens_model(cfg, enc, discarded, checkpoint)
        elif kind == "open_clip":
            out[name] = _open_clip(bundle, cfg, labels, discarded)
    log.info("IMP negatives: %s; scored by %s", discarded.note, sorted(out))
    return out


def run_negatives(
    cfg: EvalConfig, labels: SplitLabels, enc: EncodedSplit, checkpoint: str | None, systems: dict[str, Any]
) -> tuple[tuple[np.ndarray, dict[str, np.ndarray]] | None, dict[str, Any] | None]:
    """((image [k] of each discarded caption, {system: [k] scores}), meta) of an evaluation run,
    or (None, None) without `imp` or with `imp.negatives: shifted`."""
    from training.evaluation.inputs import discarded_captions

    if cfg.imp is None or cfg.imp.negatives != "discarded":
        return None, None
    discarded = discarded_captions(cfg.export_dir, cfg.imp.build_run, labels)
    scores = discarded_pair_scores(cfg, labels, discarded, enc, checkpoint, systems)
    return (discarded.image, scores), {"source": discarded.note, "scored_by": sorted(scores)}


def imp_by_system(
    all_scores: dict[str, Any],
    caption_image: np.ndarray,
    difficulty: np.ndarray,
    ks: tuple[int, ...],
    discarded: tuple[np.ndarray, dict[str, np.ndarray]] | None,
) -> dict[str, dict[str, float]]:
    """IMP Tables 4-5 of every system's [n_images, n_captions] scores; the discarded captions
    are the AUPRC negatives of the systems that scored them."""
    image, scores = discarded if discarded is not None else (None, {})
    return {
        name: imp_metrics(
            sim, caption_image, difficulty, ks=ks, discarded_image=image, discarded_scores=scores.get(name)
        )
        for name, sim in all_scores.items()
    }
