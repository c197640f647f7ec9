"""Frozen models re-scored on swapped splits: the results of `backbone_scaling` (main Table 6,
supp. Table 7: other image-side prompts) and `generator_swap` (supp. Table 6: other captions).

The papers train the lens model (and the fine-tuned global-only baseline) once, on the build
whose captions and prompts came from InternVL3.5-38B, and then only change which generator
wrote one kind of text of the test split. So nothing is trained here: the main evaluation's
models are loaded once, every configured build's split is swapped in (`swapped_split`), encoded
and scored with the same `evaluate_encoded` as the main evaluation.
"""

from __future__ import annotations

import logging
from typing import Any

from training.evaluation.config import EvalConfig, SwapSection
from training.evaluation.evaluate import evaluate_encoded
from training.evaluation.systems.swapped_split import SwappedPart, swap_texts
from training.evaluation.types import FINE_TUNED, SplitLabels
from training.evaluation.types import MAIN_SYSTEM as MAIN

log = logging.getLogger(__name__)


NO_GLOBAL_CHECKPOINT = "baselines.global_only_checkpoint not set (encodings of the evaluated captions cannot score other captions)"


def slim_config(cfg: EvalConfig) -> EvalConfig:
    """The evaluation config without the extras a re-scored split does not report."""
    baselines = cfg.baselines.model_copy(update={"similarity_ablations": False, "text_only": False})
    return cfg.model_copy(update={"routing": False, "imp": None, "baselines": baselines})


def _per_system(systems: dict[str, dict[str, dict]]) -> dict[str, dict[str, dict]]:
    """{protocol: {system: metrics}} -> {system: {protocol: metrics}} for the two rows we keep."""
    out: dict[str, dict[str, dict]] = {}
    for protocol, by_name in systems.items():
        for name in (MAIN, FINE_TUNED):
            if name in by_name:
                out.setdefault(name, {})[protocol] = by_name[name]
    return out


class SwapModels:
    """The main evaluation's lens model and the global-only baseline, each loaded on first use
    (one instance serves both harnesses of a run)."""

    def __init__(self, cfg: EvalConfig, source: dict) -> None:
        from training.evaluation.lens_models import lens_model_loader

        self._lens_loader, self.lens_reason = lens_model_loader(cfg, source)
        self._global_ckpt = cfg.baselines.global_only_checkpoint
        self._lens = self._global = None

    @property
    def lens(self):
        if self._lens is None and self._lens_loader is not None:
            self._lens = self._lens_loader()
        return self._lens

    @property
    def global_only(self):
        if self._global is None and self._global_ckpt:
            from training.evaluation.lens_models import checkpoint_bundle

            self._global = checkpoint_bundle(self._global_ckpt)
        return self._global


def _score_swapped(
    swapped: SplitLabels, models: SwapModels, cfg: EvalConfig, with_global: bool
) -> dict[str, dict[str, dict]]:
    from training.evaluation.inputs import encode_in_process
    from training.evaluation.scoring.zero_shot import global_mode_scores

    enc = encode_in_process(*models.lens, swapped)
    extra = {}
    if with_global and models.global_only is not None:
        extra[FINE_TUNED] = global_mode_scores(*models.global_only, swapped.image_paths, swapped.captions)
    return _per_system(evaluate_encoded(enc, slim_config(cfg), extra, None)["systems"])


def swap_results(
    cfg: EvalConfig,
    labels: SplitLabels,
    results: dict[str, Any],
    source: dict,
    entries: list[SwapSection],
    part: SwappedPart,
    with_global: bool,
    models: SwapModels | None = None,
) -> dict[str, Any]:
    """{"part", "order" (the config's rows), "rows": {row: {system: {protocol: metrics}}}, "coverage",
    "unavailable": {row or system: reason}}.

    An entry without export_dir is the evaluated export: its rows are the main evaluation's.
    with_global: also re-score the global-only baseline (needs its checkpoint; else a reason).
    models: loaded models to reuse; None = load on first use here.
    """
    from training.evaluation.inputs import split_labels

    models = models or SwapModels(cfg, source)
    out: dict[str, Any] = {"part": part, "order": [e.row for e in entries], "rows": {}, "coverage": {}}
    out["unavailable"] = {}
    for e in entries:
        if e.export_dir is None:
            out["rows"][e.row] = _per_system(results["systems"])
            out["coverage"][e.row] = {"source": "the evaluated export"}
            continue
        if models.lens is None:
            out["unavailable"][e.row] = models.lens_reason
            continue
        swapped, coverage = swap_texts(labels, split_labels(e.export_dir, cfg.split), part)
        out["rows"][e.row] = _score_swapped(swapped, models, cfg, with_global)
        out["coverage"][e.row] = {"source": e.export_dir, **coverage}
        log.info("%s: %s of %s scored (%s)", part, e.row, e.export_dir, coverage)
    if with_global and not cfg.baselines.global_only_checkpoint:
        out["unavailable"][FINE_TUNED] = NO_GLOBAL_CHECKPOINT
    return out


def add_harness_results(results: dict[str, Any], cfg: EvalConfig, labels: SplitLabels, source: dict) -> None:
    """Adds `backbone_scaling` (each configured build's prompts) and `generator_swap` (each build's
    captions, the global-only baseline re-scored too) when the config lists builds for them; their
    tables are `training.evaluation.tables.harness_tables`."""
    models = SwapModels(cfg, source)  # loads nothing until a swapped split needs it
    if cfg.backbone_scaling:
        results["backbone_scaling"] = swap_results(
            cfg, labels, results, source, cfg.backbone_scaling, "prompts", False, models
        )
    if cfg.generator_swap:
        results["generator_swap"] = swap_results(
            cfg, labels, results, source, cfg.generator_swap, "captions", True, models
        )
