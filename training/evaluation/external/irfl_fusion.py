"""IRFL rows beyond one CLIP: seed 004's weighted ensemble and supervised MLP, and every zero-shot entry.

`irfl_extra_systems(cfg, task)` returns the [n_phrases, n_images] scores of
- "Ours: Weighted Ens. (seed 004)" and "Ours: Supervised MLP (seed 004)" from
  `baselines.irfl_fusion` (`training.baselines.clip_fusion`): the CLIP variants are encoded once
  per task (evaluated, validation, training rows); the weights are the best of the grid on the
  validation rows (or the configured ones), the MLP is trained on the training rows and
  early-stopped on the validation rows;
- "<row> (zero-shot)" for each `baselines.zero_shot` entry (e.g. BLIP-2, seed 004 Table 1's
  BLIP2 row), scored as on the Lenses split (BLIP-2: its ITC score).
Rows it cannot run get a reason; `fusion` (weights, the validation grid of seed 004 Table 2,
the MLP's history) goes to metrics.json.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from training.baselines.clip_fusion import (
    Embeddings,
    MLPRecipe,
    mlp_score_matrix,
    train_fusion_mlp,
    tune_weights,
    weighted_ensemble,
)
from training.external.irfl import DetectionTask, detection_accuracy

ENSEMBLE = "Ours: Weighted Ens. (seed 004)"
MLP = "Ours: Supervised MLP (seed 004)"


def _embed(bundles: list, task: DetectionTask, batch_size: int) -> Embeddings:
    from training.baselines.open_clip import encode_open_clip

    pairs = [encode_open_clip(*b, task.image_paths, task.phrases, batch_size=batch_size) for b in bundles]
    return Embeddings([img.float().cpu() for img, _ in pairs], [txt.float().cpu() for _, txt in pairs])


def _sims(emb: Embeddings) -> np.ndarray:
    """[k, P, I] cosine of every variant (Eq. 1; the embeddings are unit-norm)."""
    return np.stack([(t @ v.T).numpy() for v, t in zip(emb.images, emb.texts, strict=True)])


def _accuracy(task: DetectionTask):
    return lambda sim: detection_accuracy(task, sim)["accuracy"]


def fusion_scores(
    section, task: DetectionTask
) -> tuple[dict[str, np.ndarray], dict[str, str], dict[str, Any]]:
    """(scores, reasons, meta) of the ensemble and MLP rows on `task` (section: IrflFusionSection)."""
    from training.baselines.open_clip import load_open_clip
    from training.evaluation.external.irfl import read_irfl_items

    if not section.members:
        why = "not run: baselines.irfl_fusion.members lists no CLIP variants"
        return {}, {ENSEMBLE: why, MLP: why}, {}
    names = [m.name for m in section.members]
    bundles = [
        load_open_clip(
            m.model_name, pretrained=m.pretrained, model_config=m.model_config_path, device=section.device
        )
        for m in section.members
    ]
    sims = _sims(_embed(bundles, task, section.batch_size))
    valid = read_irfl_items(section.valid)[0] if section.valid else None
    valid_emb = _embed(bundles, valid, section.batch_size) if valid is not None else None
    scores: dict[str, np.ndarray] = {}
    reasons: dict[str, str] = {}
    meta: dict[str, Any] = {"members": names}
    if section.weights is not None:
        scores[ENSEMBLE] = weighted_ensemble(sims, section.weights)
        meta["weights"] = list(section.weights)
    elif valid_emb is not None:
        w, acc, grid, grid_acc = tune_weights(_sims(valid_emb), _accuracy(valid), section.grid_step)
        scores[ENSEMBLE] = weighted_ensemble(sims, w)
        meta.update(weights=w.tolist(), valid_accuracy=acc)
        # seed 004 Table 2: the accuracy of every weight configuration on the validation rows
        meta["grid"] = [
            {"weights": g.tolist(), "valid_accuracy": float(a)} for g, a in zip(grid, grid_acc, strict=True)
        ]
    else:
        reasons[ENSEMBLE] = (
            "not run: baselines.irfl_fusion needs `valid` rows to tune the weights, or `weights`"
        )
    if section.train and valid_emb is not None:
        scores[MLP], meta["mlp"] = _mlp(section, bundles, (valid, valid_emb), task)
    else:
        reasons[MLP] = (
            "not run: baselines.irfl_fusion needs `train` rows (fitting) and `valid` rows (early stopping)"
        )
    return scores, reasons, meta


def _mlp(section, bundles: list, valid: tuple[DetectionTask, Embeddings], task: DetectionTask):
    from training.evaluation.external.irfl import read_irfl_items

    train = read_irfl_items(section.train)[0]
    train_emb = _embed(bundles, train, section.batch_size)
    v_task, v_emb = valid
    recipe = MLPRecipe(**section.mlp.model_dump())

    def valid_accuracy(model) -> float:
        return detection_accuracy(v_task, mlp_score_matrix(model, v_emb, v_task.candidates))["accuracy"]

    model, history = train_fusion_mlp((train_emb, train.candidates, train.n_answers), valid_accuracy, recipe)
    emb = _embed(bundles, task, section.batch_size)
    return mlp_score_matrix(model, emb, task.candidates), {**history, "n_train_rows": len(train.phrases)}


@torch.no_grad()
def zero_shot_irfl_scores(entries, task: DetectionTask) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """({"<row> (zero-shot)": [P, I] scores}, reasons) of the `baselines.zero_shot` entries on IRFL."""
    from training.evaluation.scoring.zero_shot import zero_shot_systems

    scores, unavailable = zero_shot_systems(entries, task.image_paths, task.phrases)  # [I, P] each
    name = "{} (zero-shot)".format
    return {name(r): s.T for r, s in scores.items()}, {name(r): why for r, why in unavailable.items()}


def irfl_extra_systems(
    cfg, task: DetectionTask
) -> tuple[dict[str, np.ndarray], dict[str, str], dict[str, Any]]:
    """(scores, reasons, fusion meta) of the zero-shot entries and seed 004's fusion rows on `task`."""
    scores, reasons = zero_shot_irfl_scores(cfg.baselines.zero_shot, task)
    fused, why, meta = fusion_scores(cfg.baselines.irfl_fusion, task)
    return {**scores, **fused}, {**reasons, **why}, meta


def fusion_grid_markdown(fusion: dict[str, Any], top: int = 10) -> str:
    """Seed 004 Table 2's layout: weight configurations and their validation accuracy, best first."""
    from training.evaluation.markdown import table

    grid = sorted(fusion.get("grid", []), key=lambda g: -g["valid_accuracy"])[:top]
    header = [*fusion["members"], "valid accuracy (%)"]
    return table(header, [[*(f"{w:.1f}" for w in g["weights"]), f"{g['valid_accuracy']:.1f}"] for g in grid])
