"""The evaluation run: encodings + export tables -> every metric and report of the paper.

`evaluate_encoded` is the core (pure: tensors in, results dict out); `run_evaluation` adds
I/O: it reads the export split and the lens model's encodings (from `lenses encode`, or by
encoding with `training.evaluation.encode` when only a training config is given), runs the configured
baselines, ablations and external benchmarks, and writes the reports.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from training.baselines.clip_finetune import clip_finetune_system
from training.evaluation.config import EvalConfig
from training.evaluation.external.artemis_irfl import external_benchmarks
from training.evaluation.external.karpathy import karpathy_benchmarks
from training.evaluation.imp.aggregates import add_imp_aggregates
from training.evaluation.imp.discarded import (
    NegativeScores,
    imp_by_system,
    imp_negative_texts,
    run_negatives,
    scoring_texts,
)
from training.evaluation.imp.split import difficulty_codes
from training.evaluation.imp.split_models import imp_table2
from training.evaluation.inputs import (
    global_only_scores,
    lens_model_encodings,
    open_clip_model,
    open_clip_scores,
    split_labels,
)
from training.evaluation.metrics.lens_slot import lens_slot_metrics
from training.evaluation.metrics.retrieval import protocol_free, retrieval_metrics
from training.evaluation.metrics.routing import fallback_rates, routing_matrix
from training.evaluation.scoring.ablations import (
    SIMILARITY_VARIANTS,
    similarity_ablation_scores,
    text_only_retrieval,
)
from training.evaluation.scoring.similarity import all_lens_text_slots, label_text_slots, score_lens_slots
from training.evaluation.scoring.zero_shot import zero_shot_systems
from training.evaluation.systems.paper import add_paper_results, fine_tuned_scores
from training.evaluation.systems.swap import add_harness_results
from training.evaluation.types import FINE_TUNED, MAIN_SYSTEM, EncodedSplit

log = logging.getLogger(__name__)

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
    negatives (None: shifted), see `training.evaluation.imp.discarded.imp_by_system`.
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


def summary_lines(results: dict[str, Any]) -> list[str]:
    """A few headline numbers for logs and the CLI."""
    lines = []
    for protocol, systems in results["systems"].items():
        for name, m in systems.items():
            lines.append(
                f"[{protocol}] {name}: I->T R@1 {m['all/i2t/R@1']:.2f}  T->I R@1 {m['all/t2i/R@1']:.2f}  "
                f"RSUM {m['RSUM']:.1f}  LC@10 {m['LC@10']:.1f}  "
                f"macro I->T R@1 {m['macro/i2t/R@1']:.2f}  macro T->I R@1 {m['macro/t2i/R@1']:.2f}"
            )
    return lines


def write_outputs(results: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    from training.evaluation.tables.reports import write_reports

    return write_reports(results, out_dir)


def run_evaluation(cfg: EvalConfig) -> tuple[dict[str, Any], dict[str, Path]]:
    """Encode (or read encodings), score, compute every metric and write the reports."""
    labels = split_labels(cfg.export_dir, cfg.split)
    enc, source = lens_model_encodings(cfg, labels)
    if source.get("untrained"):
        log.warning("evaluating an UNTRAINED lens model (no checkpoint found)")
    chosen = imp_negative_texts(cfg, labels)  # IMP's AUPRC negatives, one discarded caption per image
    texts = scoring_texts(labels, chosen)  # every system below scores them beside the captions
    extra: dict[str, np.ndarray] = {}
    cannot: dict[str, str] = {}  # systems that cannot score new texts, why
    if cfg.baselines.global_only_encodings:
        extra[FINE_TUNED] = global_only_scores(cfg.baselines.global_only_encodings, labels)
        cannot[FINE_TUNED] = "read from baselines.global_only_encodings (the split's texts only)"
    elif cfg.baselines.global_only_checkpoint:  # encoded here from the checkpoint instead
        extra[FINE_TUNED] = fine_tuned_scores(cfg.baselines.global_only_checkpoint, labels, texts)
    clip_bundle, open_clip_entry = None, None
    if cfg.baselines.open_clip.enabled:
        clip_bundle = open_clip_model(cfg)
        oc = cfg.baselines.open_clip
        weights = oc.pretrained or "random weights"
        name = f"Zero-shot open_clip ({Path(oc.model_config_path).stem if oc.model_config_path else oc.model_name}, {weights})"
        extra[name] = open_clip_scores(clip_bundle, cfg, labels.image_paths, texts)
        open_clip_entry = (name, clip_bundle)
    clip_systems, clip_meta = clip_finetune_system(cfg, labels, texts)  # supp. Table 9's fine-tuned CLIP
    extra.update(clip_systems)
    zero_shot, unavailable = zero_shot_systems(cfg.baselines.zero_shot, labels.image_paths, texts)
    extra.update(zero_shot)  # the zero-shot rows of main Table 2, by their paper names
    difficulty, imp_summary = difficulty_codes(cfg, labels) if cfg.imp is not None else (None, None)
    extra, negatives, negatives_meta = run_negatives(cfg, labels, enc, source, chosen, extra, cannot)
    results = evaluate_encoded(enc, cfg, extra, difficulty, negatives)
    add_paper_results(results, cfg, labels, source, unavailable, evaluate_encoded, enc.txt_global)
    add_harness_results(results, cfg, labels, source, evaluate_encoded)  # main Table 6, supp. Tables 6-7
    results["meta"].update(clip_meta)
    if imp_summary is not None:
        results["meta"]["imp_split"] = imp_summary
    results["meta"]["imp_negatives"] = negatives_meta  # None without imp or with imp.negatives: shifted
    table = imp_summary["table"] if imp_summary else None  # IMP Tables 2 and 11
    table2 = imp_table2(cfg, results["imp"], labels, difficulty, chosen) if cfg.imp is not None else None
    add_imp_aggregates(results, table2, table, labels.caption_ids)
    results["external"], irfl = external_benchmarks(cfg, clip_bundle)
    if irfl is not None:
        results["irfl"] = irfl
    results.update(karpathy_benchmarks(cfg, source, open_clip_entry))  # supp. Tables 1-2
    if open_clip_entry is not None:  # the paper row (CLIP or OpenCLIP) it fills in main Tables 2, 5
        results["open_clip_row"] = {"row": cfg.baselines.open_clip.row, "system": open_clip_entry[0]}
    results["meta"]["lens_model"] = source
    results["meta"]["config"] = cfg.model_dump(mode="json")
    paths = write_outputs(results, cfg.out_dir)
    return results, paths
