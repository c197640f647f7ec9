"""The external benchmarks run beside the Lenses split: ArtEmis retrieval and IRFL detection (seed 004).

Only prompt-free scorers (zero-shot open_clip, LoRA-CLIP) run here; `run` calls it, IRFL's own rows are `irfl`.
"""

from __future__ import annotations

from typing import Any

from training.baselines.lora_clip.metrics import figurative_metrics
from training.evaluation.config import EvalConfig
from training.evaluation.inputs import open_clip_scores
from training.evaluation.metrics.retrieval import retrieval_metrics


def external_benchmarks(
    cfg: EvalConfig, clip_bundle
) -> tuple[dict[str, dict[str, Any]], dict[str, Any] | None]:
    """(ArtEmis retrieval and IRFL detection with the zero-shot open_clip baseline, seed 004's IRFL table).

    The lens model encodes images together with their image-side prompts, which these datasets
    do not have, so only prompt-free scorers are run on them here.
    """
    if not (cfg.external.artemis or cfg.external.irfl):
        return {}, None
    if clip_bundle is None and cfg.external.irfl:
        raise ValueError("IRFL needs baselines.open_clip.enabled (the prompt-free scorer)")
    from training.external.artemis import read_artemis

    out: dict[str, dict[str, Any]] = {}
    if cfg.external.artemis and clip_bundle is not None:  # every system's ArtEmis rows: results["artemis"]
        a = cfg.external.artemis
        ds = read_artemis(a.csv, a.wikiart_dir, on_missing=a.on_missing, split=a.split)
        sim = open_clip_scores(clip_bundle, cfg, ds.image_paths, ds.texts)
        m = retrieval_metrics(sim, ds.caption_image, ds.caption_lens, ks=cfg.metrics.ks)
        out["ArtEmis (zero-shot open_clip)"] = {
            **{k: v for k, v in m.items() if k.startswith("all/")},
            "n_rejected_rows": float(len(ds.rejections)),
        }
    if not cfg.external.irfl:
        return out, None
    irfl, table = irfl_benchmark(cfg, clip_bundle)
    return {**out, **irfl}, table


def irfl_benchmark(cfg: EvalConfig, clip_bundle) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """(per CSV: zero-shot open_clip metrics, seed 004's IRFL table of every system over all CSVs)."""
    from training.evaluation.external.irfl import (
        LORA_CLIP,
        ZERO_SHOT,
        irfl_table,
        lora_clip_scores,
        read_irfl_items,
    )
    from training.evaluation.external.irfl_fusion import irfl_extra_systems

    task, per_item = read_irfl_items(cfg.external.irfl)
    zero_shot = open_clip_scores(clip_bundle, cfg, task.image_paths, task.phrases).T  # [n_phrases, n_images]
    scores = {ZERO_SHOT: zero_shot}
    lc = cfg.baselines.lora_clip
    if lc.adapter_dir is not None:
        scores[LORA_CLIP] = lora_clip_scores(lc, task.image_paths, task.phrases)
    reasons = {LORA_CLIP: "baselines.lora_clip.adapter_dir not set (train with `lenses train-lora-clip`)"}
    extra, extra_reasons, fusion = irfl_extra_systems(cfg, task)  # seed 004's ensemble, MLP; BLIP-2
    scores.update(extra)
    reasons.update(extra_reasons)
    out: dict[str, dict[str, Any]] = {}
    row, col = 0, 0
    for stem, item_task in per_item.items():  # the pooled task keeps each CSV's rows and images in order
        rows, cols = len(item_task.phrases), len(item_task.image_paths)
        sim = scores[ZERO_SHOT][row : row + rows, col : col + cols]
        out[f"IRFL {stem} (zero-shot open_clip)"] = {
            **figurative_metrics(item_task, sim),
            "n_rejected_rows": float(len(item_task.rejections)),
        }
        row, col = row + rows, col + cols
    return out, {**irfl_table(task, scores, reasons), "fusion": fusion}
