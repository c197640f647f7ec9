"""IMP Table 2's models: the AUPRC per difficulty of every model of the IMP split (seed 003).

IMP Table 2 reports "the mean AUPRC of the seven models", its seven CLIP models: the six OpenAI
CLIP voters of the difficulty split and the ViT-g/14 tie-breaker (seed 003, the split section),
i.e. `imp.models`. Each is an open_clip model read from local files, loaded again here (the split
keeps only the cosine of each caption with its own image) to score the same negative pairs as
every other IMP row: per captioned image, the chosen discarded caption with its own image, or
the shifted stand-in (the image with the first caption of the next captioned image).

Cost: one more pass of each IMP model over the split's images and captions (the split's own
cost again), plus the chosen discarded captions.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from training.evaluation.config import EvalConfig
from training.evaluation.imp.metrics import imp_negatives, pairs_auprc
from training.evaluation.types import DiscardedTexts, SplitLabels

log = logging.getLogger(__name__)


def pair_cosines(img: torch.Tensor, txt: torch.Tensor, rows: Any, cols: Any) -> np.ndarray:
    """[k] cosine of unit-norm image rows[i] and text cols[i] (no full matrix)."""
    r = torch.as_tensor(np.array(rows, dtype=np.int64))
    c = torch.as_tensor(np.array(cols, dtype=np.int64))
    return (img[r] * txt[c]).sum(-1).double().numpy()


def model_auprc(
    img: torch.Tensor,
    txt: torch.Tensor,
    caption_image: np.ndarray,
    difficulty: np.ndarray,
    chosen: DiscardedTexts | None,
) -> dict[str, float]:
    """AUPRC per difficulty of one model from its unit-norm embeddings.

    img [n_images, d]; txt [n_captions + k, d]: the split's captions, then the k chosen
    discarded captions (k = 0 without them); the negatives are those of `imp_negatives`."""
    ci = np.asarray(caption_image, dtype=np.int64)
    n = len(ci)
    negatives = imp_negatives(ci, chosen.image if chosen is not None and len(chosen.texts) else None)
    pos = pair_cosines(img, txt, ci, np.arange(n))
    neg = pair_cosines(img, txt, negatives.images, negatives.shifted_caption)
    own = negatives.discarded >= 0
    if own.any():  # the image's chosen discarded caption instead of the shifted one
        neg[own] = pair_cosines(img, txt, negatives.images[own], n + negatives.discarded[own])
    return pairs_auprc(pos, neg, difficulty, int(own.sum()))


def split_model_auprc(
    cfg: EvalConfig, labels: SplitLabels, difficulty: np.ndarray, chosen: DiscardedTexts | None
) -> dict[str, dict[str, float]]:
    """{model name: AUPRC per difficulty and negative counts} for every model of `imp.models`."""
    from training.baselines.open_clip import encode_open_clip
    from training.evaluation.imp.split import load_imp_model

    imp = cfg.imp
    texts = list(labels.captions) + (list(chosen.texts) if chosen is not None else [])
    out = {}
    for model in imp.models:
        bundle = load_imp_model(model, imp.device)
        img, txt = encode_open_clip(*bundle, labels.image_paths, texts, batch_size=imp.batch_size)
        out[model.name] = model_auprc(img, txt, labels.caption_image, difficulty, chosen)
        del bundle
        log.info("IMP Table 2 model %s: all/AUPRC %.4f", model.name, out[model.name]["all/AUPRC"])
    return out


SPLIT_SOURCE = "the IMP split's models (imp.models)"
ZERO_SHOT_SOURCE = "the zero-shot models (baselines.zero_shot)"


def imp_table2(
    cfg: EvalConfig,
    imp_rows: dict[str, dict[str, Any]],
    labels: SplitLabels,
    difficulty: np.ndarray,
    chosen: DiscardedTexts | None,
) -> dict[str, Any]:
    """IMP Table 2 over the models `imp.table2_models` names; imp_rows: the run's IMP rows
    (`results["imp"]`, for `zero_shot`). `{"unavailable": why}` when the split has no models."""
    from training.evaluation.imp.aggregates import auprc_over_models

    if cfg.imp.table2_models == "zero_shot":
        return {
            **auprc_over_models(imp_rows, [e.row for e in cfg.baselines.zero_shot]),
            "source": ZERO_SHOT_SOURCE,
        }
    if not cfg.imp.models:
        return {"unavailable": "imp.table2_models is split, but imp.models is empty (the split was read "
                "from imp.difficulty_table): list IMP's models there or set imp.table2_models: zero_shot"}  # fmt: skip
    per_model = split_model_auprc(cfg, labels, difficulty, chosen)
    return {**auprc_over_models(per_model, list(per_model)), "source": SPLIT_SOURCE, "per_model": per_model}
