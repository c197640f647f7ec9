"""IMP Tables 4-5 of every system from its score matrix, with the AUPRC negatives each system got:
the chosen discarded captions it scored (`training.evaluation.imp.discarded`) or the shifted one.
The evaluation core (`training.evaluation.evaluate`) reads it; it loads no model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from training.evaluation.imp.metrics import imp_metrics, imp_negatives
from training.evaluation.types import DiscardedTexts


@dataclass
class NegativeScores:
    """The AUPRC negatives of a run: the caption chosen per image, each system's scores of it with
    its image, and why the other systems fell back to shifted negatives."""

    chosen: DiscardedTexts  # at most one per image
    scores: dict[str, np.ndarray] = field(default_factory=dict)  # {system: [k]}
    fell_back: dict[str, str] = field(default_factory=dict)  # {system: reason}


def n_visual(validators: list[str]) -> int:
    from lenses_data.stages.visual_validate import STAGE as VISUAL

    return sum(v == VISUAL for v in validators)


def negatives_label(metrics: dict[str, float], fell_back: str | None) -> str:
    """What an IMP row's AUPRC negatives were, for its table cell."""
    shifted = int(metrics["n_negatives_shifted"])
    if metrics["n_negatives_discarded"] == 0:
        why = fell_back or "no image of the split has a discarded caption"
        return f"another image's caption (shifted) for all {shifted} images: {why}"
    visual, text = int(metrics["n_negatives_visual"]), int(metrics["n_negatives_text"])
    own = f"same image's discarded caption: {visual} visual-, {text} text-validator"
    return own + (f"; {shifted} shifted (image without one)" if shifted else "")


def _validator_counts(caption_image: np.ndarray, negatives: NegativeScores, scored: bool) -> dict[str, float]:
    """How many of the system's negatives were visual- and text-validator discards."""
    if not scored:
        return {"n_negatives_visual": 0.0, "n_negatives_text": 0.0}
    used = imp_negatives(caption_image, negatives.chosen.image).discarded
    kinds = [negatives.chosen.validator[i] for i in used[used >= 0]]
    visual = n_visual(kinds)
    return {"n_negatives_visual": float(visual), "n_negatives_text": float(len(kinds) - visual)}


def imp_by_system(
    all_scores: dict[str, Any],
    caption_image: np.ndarray,
    difficulty: np.ndarray,
    ks: tuple[int, ...],
    negatives: NegativeScores | None,
) -> dict[str, dict[str, Any]]:
    """IMP Tables 4-5 of every system's [n_images, n_captions] scores; a system's AUPRC negatives
    are the chosen discarded captions when it scored them, else shifted. Each entry also says
    which (`negatives`: a label; `n_negatives_visual`, `n_negatives_text`, `n_negatives_shifted`)."""
    out = {}
    for name, sim in all_scores.items():
        scores = negatives.scores.get(name) if negatives is not None else None
        image = negatives.chosen.image if scores is not None else None
        m: dict[str, Any] = imp_metrics(
            sim, caption_image, difficulty, ks=ks, discarded_image=image, discarded_scores=scores
        )
        if negatives is None:
            m.update({"n_negatives_visual": 0.0, "n_negatives_text": 0.0})
            m["negatives"] = negatives_label(m, "imp.negatives is shifted")
        else:
            m.update(_validator_counts(caption_image, negatives, scores is not None))
            m["negatives"] = negatives_label(m, negatives.fell_back.get(name))
        out[name] = m
    return out
