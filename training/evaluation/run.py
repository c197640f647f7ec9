"""The evaluation run: encodings + export tables -> every metric and report of the paper.

`training.evaluation.evaluate.evaluate_encoded` is the core (pure: tensors in, results dict out);
`run_evaluation` adds I/O: it reads the export split and the lens model's encodings (from `lenses encode`, or by
encoding with `training.evaluation.encode` when only a training config is given), runs the configured
baselines, ablations and external benchmarks, and writes the reports.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from training.baselines.clip_finetune import clip_finetune_system
from training.evaluation.config import EvalConfig
from training.evaluation.evaluate import evaluate_encoded
from training.evaluation.external.artemis_irfl import external_benchmarks
from training.evaluation.external.karpathy import karpathy_benchmarks
from training.evaluation.imp.aggregates import add_imp_aggregates
from training.evaluation.imp.discarded import imp_negative_texts, run_negatives, scoring_texts
from training.evaluation.imp.split import difficulty_codes
from training.evaluation.imp.split_models import imp_table2
from training.evaluation.inputs import (
    global_only_scores,
    lens_model_encodings,
    open_clip_model,
    open_clip_scores,
    split_labels,
)
from training.evaluation.metrics.keys import LC10, RSUM
from training.evaluation.scoring.zero_shot import zero_shot_systems
from training.evaluation.systems.paper import add_paper_results, fine_tuned_scores
from training.evaluation.systems.swap import add_harness_results
from training.evaluation.types import FINE_TUNED

log = logging.getLogger(__name__)


def summary_lines(results: dict[str, Any]) -> list[str]:
    """A few headline numbers for logs and the CLI."""
    lines = []
    for protocol, systems in results["systems"].items():
        for name, m in systems.items():
            lines.append(
                f"[{protocol}] {name}: I->T R@1 {m['all/i2t/R@1']:.2f}  T->I R@1 {m['all/t2i/R@1']:.2f}  "
                f"{RSUM} {m[RSUM]:.1f}  {LC10} {m[LC10]:.1f}  "
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
    add_paper_results(results, cfg, labels, source, unavailable, enc.txt_global)
    add_harness_results(results, cfg, labels, source)  # main Table 6, supp. Tables 6-7
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
