"""The core of an evaluation: one split's encodings (and extra systems' score matrices) -> the
results dict of every metric (pure: tensors in, results dict out). `training.evaluation.run` calls it
for the main split; `systems/` call it for ablation variants and swapped splits, importing it from
here (it imports nothing of theirs).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from training.evaluation.config import EvalConfig
from training.evaluation.imp.by_system import NegativeScores, imp_by_system
from training.evaluation.metrics.ablations import (
    SIMILARITY_VARIANTS,
    similarity_ablation_scores,
    text_only_retrieval,
)
from training.evaluation.metrics.lens_slot import lens_slot_metrics
from training.evaluation.metrics.retrieval import protocol_free, retrieval_metrics
from training.evaluation.metrics.routing import fallback_rates, routing_matrix
from training.evaluation.scoring.similarity import all_lens_text_slots, label_text_slots, score_lens_slots
from training.evaluation.types import MAIN_SYSTEM, EncodedSplit

ABLATION_TITLES = {
    "global": "Global only",
    "no_mask": "No-mask smooth Chamfer",
    "lens_masked": "Lens-masked smooth Chamfer",
    "lens_masked_global": "Full model (lens-masked + global)",
}


def _metrics(sim: Any, enc: EncodedSplit, cfg: EvalConfig, protocol: str) -> dict[str, float]:
    return retrieval_metrics(
        sim,
        enc.caption_image,
        enc.caption_lens,
        ks=cfg.metrics.ks,
        protocol=protocol,
        max_chunk_bytes=cfg.metrics.max_chunk_bytes,
    )


def gallery_protocols(cfg: EvalConfig) -> list[str]:
    """The configured protocols that rank one score matrix (every system has them)."""
    return [p for p in cfg.metrics.protocols if p != "lens_slot"]


def _lens_slot(enc: EncodedSplit, cfg: EvalConfig, txt_lens: torch.Tensor, overall: dict) -> dict[str, float]:
    """The main paper's per-lens protocol (needs slots: lens model only) next to its overall metrics."""
    s = cfg.scoring
    per_lens = lens_slot_metrics(
        enc.img_slots, enc.img_slot_lens, enc.img_global, enc.txt_slots, enc.txt_global,
        enc.caption_image, enc.caption_lens, txt_slot_lens=txt_lens,
        gallery=cfg.metrics.lens_slot_gallery, alpha=s.alpha,
        denominator=s.denominator, fallback=s.fallback, image_chunk=s.image_chunk, text_chunk=s.text_chunk,
        ks=cfg.metrics.ks, max_chunk_bytes=cfg.metrics.max_chunk_bytes,
    )  # fmt: skip
    return {**protocol_free(overall), **per_lens}


def _text_slot_lens(enc: EncodedSplit, cfg: EvalConfig) -> torch.Tensor:
    if cfg.scoring.text_slots == "all":
        return all_lens_text_slots(len(enc.txt_slots))
    return label_text_slots(enc.caption_lens)


def evaluate_encoded(
    enc: EncodedSplit,
    cfg: EvalConfig,
    extra_systems: dict[str, np.ndarray] | None = None,
    difficulty: np.ndarray | None = None,
    discarded: NegativeScores | None = None,
) -> dict[str, Any]:
    """Every metric of the lens model (and of extra systems' score matrices) on one split.

    difficulty: IMP code per caption (0 easy, 1 medium, 2 hard, -1 none) for the per-difficulty
    metrics of every system (`results["imp"]`), or None to skip them. discarded: the AUPRC
    negatives (None: shifted), see `training.evaluation.imp.by_system.imp_by_system`.
    """
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    s = cfg.scoring
    txt_lens = _text_slot_lens(enc, cfg)
    scores = score_lens_slots(
        enc.img_slots, enc.img_slot_lens, enc.img_global, enc.txt_slots, enc.txt_global,
        txt_slot_lens=txt_lens, alpha=s.alpha, denominator=s.denominator, fallback=s.fallback,
        image_chunk=s.image_chunk, text_chunk=s.text_chunk,
    )  # fmt: skip
    timings["score_lens_model"] = time.perf_counter() - t0
    systems: dict[str, dict[str, dict[str, float]]] = {p: {} for p in cfg.metrics.protocols}
    all_scores = {MAIN_SYSTEM: scores, **(extra_systems or {})}
    t0 = time.perf_counter()
    for name, sim in all_scores.items():
        for protocol in gallery_protocols(cfg):
            systems[protocol][name] = _metrics(sim, enc, cfg, protocol)
    timings["metrics"] = time.perf_counter() - t0
    if difficulty is not None:
        t0 = time.perf_counter()
        ks = cfg.metrics.ks
        imp = imp_by_system(all_scores, enc.caption_image, difficulty, ks, discarded)
        timings["metrics_imp"] = time.perf_counter() - t0
    if "lens_slot" in systems:
        t0 = time.perf_counter()
        first = gallery_protocols(cfg)
        overall = systems[first[0]][MAIN_SYSTEM] if first else _metrics(scores, enc, cfg, "full_gallery")
        systems["lens_slot"][MAIN_SYSTEM] = _lens_slot(enc, cfg, txt_lens, overall)
        timings["metrics_lens_slot"] = time.perf_counter() - t0
    results: dict[str, Any] = {"systems": systems}
    if difficulty is not None:
        results["imp"] = imp
    results["fallback"] = fallback_rates(enc.img_slot_lens, txt_lens, enc.caption_image, enc.caption_lens)
    if cfg.routing:
        routing = routing_matrix(
            enc.img_slots, enc.img_slot_lens, enc.txt_slots, enc.caption_image, enc.caption_lens,
            txt_slot_lens=txt_lens,
        )  # fmt: skip
        results["routing"] = {
            "by_lens_counts": routing.by_lens,
            "by_slot_counts": routing.by_slot,
            "fallback_counts": routing.fallback,
            "by_lens_percent": routing.percent(routing.by_lens),
            "by_slot_percent": routing.percent(routing.by_slot),
        }
    if cfg.baselines.similarity_ablations:
        t0 = time.perf_counter()
        results["ablations"] = _ablations(enc, cfg, scores)
        timings["ablations"] = time.perf_counter() - t0
    if cfg.baselines.text_only and enc.prompt_global is not None:
        results["text_only"] = text_only_retrieval(
            enc.prompt_global, enc.prompt_image, enc.prompt_lens,
            enc.txt_global, enc.caption_image, enc.caption_lens, ks=cfg.metrics.ks,
        )  # fmt: skip
    results["meta"] = {
        "n_images": int(len(enc.img_global)),
        "n_captions": int(len(enc.txt_global)),
        "image_slots_per_image": float((enc.img_slot_lens >= 0).sum(1).float().mean()),
        "ks": list(cfg.metrics.ks),
        "split": cfg.split,
        "text_slots": cfg.scoring.text_slots,
        "seconds": timings,
    }
    return results


def _ablations(enc: EncodedSplit, cfg: EvalConfig, main_scores: np.ndarray) -> dict[str, dict[str, float]]:
    """Supplementary Table 3 on the same fixed embeddings (all five text slots active)."""
    out = {}
    protocol = (gallery_protocols(cfg) or ["lens_gallery"])[0]
    for variant in SIMILARITY_VARIANTS:
        reuse = variant == "lens_masked_global" and cfg.scoring.text_slots == "all" and cfg.scoring.fallback
        sim = main_scores if reuse else similarity_ablation_scores(
            variant, enc.img_slots, enc.img_slot_lens, enc.img_global, enc.txt_slots, enc.txt_global,
            alpha=cfg.scoring.alpha, denominator=cfg.scoring.denominator,
        )  # fmt: skip
        out[ABLATION_TITLES[variant]] = _metrics(sim, enc, cfg, protocol)
    return out
