"""Scores of the discarded captions with their own image, per system: IMP's AUPRC negatives.

IMP (seed 003) classifies true pairs against "one true negative for each image", captions its
annotators rejected for that image. Our analogue is a caption of the same image that a validator
discarded (`training.evaluation.inputs.discarded_captions`), one per image: the visual
validator's (Listing 5, it saw the image, as IMP's annotators did) before the text-only
validator's (Listing 4). Every system of the IMP tables scores the same chosen captions:

- systems scored from image files and texts (zero-shot rows, open_clip, the fine-tuned CLIP,
  the global-only model from its checkpoint) get them as extra text columns of their one score
  matrix (`scoring_texts`, then `split_negative_columns`), so no image is encoded twice;
- the lens model encodes them with its checkpoint (or `train_config`) and scores each with its
  own image only (`lens_pair_scores`).

A system that cannot encode new texts (read from `encodings_dir` / `global_only_encodings`) and
an image without a discarded caption fall back to the shifted negative (another image's
caption); each IMP row says which negatives it got (`negatives_label`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from training.evaluation.config import EvalConfig
from training.evaluation.imp.by_system import NegativeScores, n_visual
from training.evaluation.scoring.similarity import all_lens_text_slots, label_text_slots, score_lens_slots
from training.evaluation.types import MAIN_SYSTEM, DiscardedTexts, EncodedSplit, SplitLabels

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


def discard_grounds(validator: str) -> str:
    """What the validator (a stage name) may discard a text for, by its listing (supp. Listings
    4-5). It discards by answering an empty string and never says which ground applied."""
    from lenses_data.annotation.validation import TEXT_VALIDATOR, VISUAL_VALIDATOR

    grounds = {
        VISUAL_VALIDATOR.stage: "Listing 5, shown the image: not grounded in the image, severely "
        "ungrammatical or dominated by artifacts, or mismatched with its lens beyond small edits",
        TEXT_VALIDATOR.stage: "Listing 4, text only (never shown the image): not fixable without "
        "changing its meaning or hallucinating, or its Focus/Category cannot match the text; "
        "it may be a true match of its image",
    }
    return grounds.get(validator, f"unknown validator stage {validator!r}")


def visual_only(discarded: DiscardedTexts) -> DiscardedTexts:
    """Only the visual validator's discards (`imp.negatives: visual_discarded`)."""
    from lenses_data.stages.visual_validate import STAGE as VISUAL

    keep = [i for i, v in enumerate(discarded.validator) if v == VISUAL]

    def pick(values: list[str]) -> list[str]:
        return [values[i] for i in keep]

    note = f"{discarded.note}; visual validator's only: {len(keep)} of {len(discarded.texts)} kept"
    return DiscardedTexts(
        pick(discarded.texts), discarded.image[keep], discarded.lens[keep], note,
        pick(discarded.text_ids), pick(discarded.validator), pick(discarded.rejection),
    )  # fmt: skip


def one_per_image(discarded: DiscardedTexts) -> DiscardedTexts:
    """The first discarded caption of each image (the reader puts the visual validator's first)."""
    _, first = np.unique(discarded.image, return_index=True)
    keep = np.sort(first)

    def pick(values: list[str]) -> list[str]:
        return [values[i] for i in keep]

    return DiscardedTexts(
        pick(discarded.texts), discarded.image[keep], discarded.lens[keep], discarded.note,
        pick(discarded.text_ids), pick(discarded.validator), pick(discarded.rejection),
    )  # fmt: skip


def imp_negative_texts(cfg: EvalConfig, labels: SplitLabels) -> DiscardedTexts | None:
    """The discarded caption chosen per image (`imp.negatives: discarded`, or `visual_discarded`
    for the visual validator's only), or None without `imp` or with `imp.negatives: shifted`."""
    from training.evaluation.inputs import discarded_captions

    if cfg.imp is None or cfg.imp.negatives == "shifted":
        return None
    found = discarded_captions(cfg.export_dir, cfg.imp.build_run, labels)
    return one_per_image(visual_only(found) if cfg.imp.negatives == "visual_discarded" else found)


def scoring_texts(labels: SplitLabels, chosen: DiscardedTexts | None) -> list[str]:
    """The texts a system scores: the split's captions, then the chosen discarded captions."""
    return list(labels.captions) + (list(chosen.texts) if chosen is not None else [])


def split_negative_columns(
    systems: dict[str, Any], n_captions: int, chosen: DiscardedTexts | None
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Score matrices [n_images, n_captions + k] -> ({system: [n_images, n_captions]}, {system: [k]
    score of chosen text t with its own image}). A matrix with n_captions columns (a system that
    could not score new texts) passes through without pair scores."""
    k = 0 if chosen is None else len(chosen.texts)
    out, pairs = {}, {}
    for name, sim in systems.items():
        width = sim.shape[1]
        if k and width == n_captions + k:
            pairs[name] = np.asarray(sim[chosen.image, n_captions + np.arange(k)], dtype=np.float32)
            sim = np.ascontiguousarray(sim[:, :n_captions])
        elif width != n_captions:
            raise ValueError(f"{name}: {width} score columns, expected {n_captions} or {n_captions + k}")
        out[name] = sim
    return out, pairs


def _lens_model(cfg: EvalConfig, enc: EncodedSplit, chosen: DiscardedTexts, bundle) -> np.ndarray:
    from training.evaluation.inputs import encode_texts
    from training.loop.inputs import Collator

    retriever, processor, data_cfg = bundle
    retriever.eval()
    slots, glob = encode_texts(retriever, Collator(processor, data_cfg, lens_mode=True), chosen.texts)
    n = len(chosen.texts)
    mask = all_lens_text_slots(n) if cfg.scoring.text_slots == "all" else label_text_slots(chosen.lens)
    return lens_pair_scores(enc, chosen.image, slots, glob, mask, cfg)


def _write_chosen(
    chosen: DiscardedTexts, labels: SplitLabels, pairs: dict[str, np.ndarray], out_dir: str
) -> str:
    """OUT/imp/negatives.parquet: one row per chosen caption, with every system's score of it."""
    import pandas as pd

    path = Path(out_dir) / "imp" / "negatives.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame({"image_id": [labels.image_ids[i] for i in chosen.image], "text_id": chosen.text_ids,
                          "validator": chosen.validator, "rejection": chosen.rejection,
                          "grounds": [discard_grounds(v) for v in chosen.validator], "text": chosen.texts})  # fmt: skip
    for name, scores in pairs.items():
        table[f"score/{name}"] = scores
    table.to_parquet(path, index=False)
    return str(path)


def run_negatives(
    cfg: EvalConfig,
    labels: SplitLabels,
    enc: EncodedSplit,
    source: dict,
    chosen: DiscardedTexts | None,
    systems: dict[str, Any],
    cannot: dict[str, str],
) -> tuple[dict[str, Any], NegativeScores | None, dict[str, Any] | None]:
    """(systems' caption matrices, their negatives, meta) of an evaluation run.

    systems: {name: scores over `scoring_texts`}; cannot: {name: why it could not score new texts};
    the lens model (`training.evaluation.run.MAIN_SYSTEM`) is scored here. Without `chosen`
    (no imp, or imp.negatives: shifted) the matrices pass through and there are no negatives.
    """
    from training.evaluation.lens_models import lens_model_loader

    systems, pairs = split_negative_columns(systems, len(labels.captions), chosen)
    if chosen is None:
        return systems, None, None
    default = "scored without the discarded captions" if chosen.texts else f"none to score: {chosen.note}"
    fell_back = {n: cannot.get(n, default) for n in systems if n not in pairs}
    loader, reason = lens_model_loader(cfg, source) if chosen.texts else (None, default)
    if loader is not None:
        pairs[MAIN_SYSTEM] = _lens_model(cfg, enc, chosen, loader())
    else:
        fell_back[MAIN_SYSTEM] = reason
    log.info("IMP negatives: %s; scored by %s", chosen.note, sorted(pairs))
    meta = {"source": chosen.note, "scored_by": sorted(pairs), "fell_back": fell_back,
            "n_images_with_discarded": len(chosen.texts),
            "n_visual_validator": n_visual(chosen.validator),
            "table": _write_chosen(chosen, labels, pairs, cfg.out_dir) if chosen.texts else None}  # fmt: skip
    return systems, NegativeScores(chosen, pairs, fell_back), meta
