"""Where the lens models of an evaluation come from: loaders of (retriever, processor, data cfg) for
the main lens model and the ablation variants that can encode new inputs, or the reason one cannot.

The systems (`systems/`), the IMP negatives (`imp/discarded`) and the external sets
(`external/karpathy`) all encode with them; they sit here, below all three, so that none of those
packages imports another for them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from training.evaluation.config import EvalConfig
from training.evaluation.inputs import retriever_from_train_config

# The rows of the lens models in the ArtEmis and Karpathy tables.
LENSES_ALL = "Lenses - All"
VARIANT_ROWS = {"lenses_literal": "Lenses - Literal", "lenses_emotional": "Lenses - Emotional"}


def checkpoint_bundle(checkpoint: str):
    """(retriever, processor, data cfg) of a saved checkpoint, on CPU."""
    from training.evaluation.encode import load_for_inference

    retriever, processor, tcfg = load_for_inference(checkpoint, torch.device("cpu"))
    return retriever, processor, tcfg.data


def lens_models(cfg: EvalConfig, source: dict) -> tuple[dict[str, Callable], dict[str, str]]:
    """{row: () -> (retriever, processor, data cfg)} of the lens models that can encode new inputs,
    and {row: why not} of those that cannot."""
    loaders: dict[str, Callable] = {}
    reasons: dict[str, str] = {}
    if source.get("checkpoint"):
        loaders[LENSES_ALL] = lambda: checkpoint_bundle(source["checkpoint"])
    elif cfg.train_config and source.get("untrained"):
        loaders[LENSES_ALL] = lambda: retriever_from_train_config(cfg)[:3]
    else:
        reasons[LENSES_ALL] = (
            "the lens model was read from encodings_dir: set checkpoint to encode new inputs"
        )
    by_role = {v.role: v for v in cfg.variants}
    for role, row in VARIANT_ROWS.items():
        v = by_role.get(role)
        if v is not None and v.checkpoint:
            loaders[row] = lambda ckpt=v.checkpoint: checkpoint_bundle(ckpt)
        else:
            reasons[row] = (
                f"no variants entry with role {role} and a checkpoint (configs/ablations/{role.replace('_', '-')})"
            )
    return loaders, reasons


def lens_model_loader(cfg: EvalConfig, source: dict) -> tuple[Callable | None, str]:
    """(loader of the main lens model's (retriever, processor, data cfg), "") or (None, why not)."""
    loaders, reasons = lens_models(cfg.model_copy(update={"variants": []}), source)
    return loaders.get(LENSES_ALL), reasons.get(LENSES_ALL, "")
