"""Supp. Tables 1-2: zero-shot retrieval on the COCO 5k and Flickr30K 1k Karpathy test sets.

Every system ranks the set's images and captions (5 per image): I->T counts an image query as a
hit when any of its captions is in the top K, T->I a caption when its image is. Systems: the
`baselines.zero_shot` entries (by their row names, e.g. "OpenAI CLIP-B/16", "BGE-VL-MLLM"), the
prompt-free `baselines.open_clip` model, and the lens model twice: "Lenses - All" (inference
setting, all five text slots) and "Lenses - Literal" (the same encodings with only the Literal
text slot active: the supplement's "restrict retrieval to the Literal lens"). The lens model
encodes each image with its image-side prompts (`prompts` of the section, optional; without them
an image has no slot and its scores are Eq. 4's global fallback).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from training.evaluation.config import EvalConfig
from training.evaluation.external_config import KarpathySection
from training.evaluation.lens_models import LENSES_ALL, lens_models
from training.evaluation.metrics.keys import RSUM
from training.evaluation.metrics.retrieval import retrieval_metrics
from training.evaluation.types import SplitLabels
from training.external.karpathy import KarpathySet, read_karpathy

log = logging.getLogger(__name__)

LENSES_LITERAL = "Lenses - Literal"
MAX_LISTED = 50
DATASETS = {"coco": "COCO 5k (supp. Table 1)", "flickr30k": "Flickr30K 1k (supp. Table 2)"}


def karpathy_metrics(sim: Any, ds: KarpathySet, ks: tuple[int, ...] = (1, 5, 10)) -> dict[str, float]:
    """I->T and T->I R@K (any of an image's captions counts), RSUM and ranks of one score matrix."""
    m = retrieval_metrics(sim, ds.caption_image, ds.caption_lens, ks=ks, protocol="full_gallery")
    return {k: v for k, v in m.items() if k.startswith("all/") or k == RSUM}


def read_prompts(table: str | None, ds: KarpathySet) -> list[list[tuple[str, int]]]:
    """Per image: (prompt, lens) from the optional table (filename, lens, text), ordered by lens.

    Rows naming an image outside the evaluated set are counted in the log, not an error: one
    prompt table can serve several splits.
    """
    sets: list[list[tuple[str, int]]] = [[] for _ in ds.image_paths]
    if table is None:
        return sets
    import pandas as pd

    from training.external.common import read_csv
    from training.retriever.lenses import lens_index

    cols = ("filename", "lens", "text")
    df = pd.read_parquet(table) if str(table).endswith(".parquet") else read_csv(table, cols, "prompts")
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"prompts table {table} lacks columns {missing}")
    row_of = {name: i for i, name in enumerate(ds.image_names or [])}
    outside = 0
    for name, lens, text in zip(df["filename"], df["lens"], df["text"], strict=True):
        row = row_of.get(str(name))
        if row is None:
            outside += 1
            continue
        sets[row].append((str(text), lens_index(str(lens))))
    if outside:
        log.info("prompts table %s: %d rows name images outside the evaluated set", table, outside)
    return [sorted(s, key=lambda p: p[1]) for s in sets]


def _lens_model_scores(bundle, ds: KarpathySet, prompt_sets, cfg: EvalConfig) -> dict[str, np.ndarray]:
    """{Lenses - All, Lenses - Literal}: one encoding pass, scored with all / only the Literal text slot."""
    from lenses_data.schemas import LENS_NAMES
    from training.evaluation.inputs import encode_in_process
    from training.evaluation.scoring.similarity import all_lens_text_slots, label_text_slots, score_lens_slots

    retriever, processor, data_cfg = bundle
    labels = SplitLabels(
        list(ds.image_paths), list(ds.image_paths), [str(i) for i in range(len(ds.texts))], list(ds.texts),
        ds.caption_image, ds.caption_lens, prompt_sets, [], np.zeros(0, np.int64), np.zeros(0, np.int64),
    )  # fmt: skip
    enc = encode_in_process(retriever, processor, data_cfg, labels)
    s, n = cfg.scoring, len(ds.image_paths)
    literal = np.full(len(ds.texts), LENS_NAMES.index("Literal"))
    out = {}
    for row, slots in (
        (LENSES_ALL, all_lens_text_slots(len(ds.texts))),
        (LENSES_LITERAL, label_text_slots(literal)),
    ):
        out[row] = score_lens_slots(
            enc.img_slots, enc.img_slot_lens, enc.img_global, enc.txt_slots, enc.txt_global,
            txt_slot_lens=slots, alpha=s.alpha, denominator=s.denominator, fallback=s.fallback,
            image_chunk=min(s.image_chunk, max(n, 1)), text_chunk=s.text_chunk,
        )  # fmt: skip
    return out


def _systems(
    cfg: EvalConfig, ds: KarpathySet, prompt_sets, source: dict, open_clip: tuple[str, Any] | None,
    unavailable: dict[str, str],
) -> Iterator[tuple[str, np.ndarray]]:  # fmt: skip
    """(row, score matrix) of every system, one at a time: a 5k x 25k matrix is 0.5 GB, so each is
    reduced to its metrics before the next is computed. Rows that cannot run go to `unavailable`."""
    from training.evaluation.scoring.zero_shot import zero_shot_systems

    for entry in cfg.baselines.zero_shot:
        scores, reasons = zero_shot_systems([entry], ds.image_paths, ds.texts)
        unavailable.update(reasons)
        yield from scores.items()
    if open_clip is not None:
        from training.evaluation.inputs import open_clip_scores

        name, bundle = open_clip
        yield name, open_clip_scores(bundle, cfg, ds.image_paths, ds.texts)
    loaders, reasons = lens_models(cfg.model_copy(update={"variants": []}), source)
    if LENSES_ALL in loaders:
        yield from _lens_model_scores(loaders[LENSES_ALL](), ds, prompt_sets, cfg).items()
    else:
        unavailable[LENSES_ALL] = unavailable[LENSES_LITERAL] = reasons[LENSES_ALL]


def karpathy_results(
    cfg: EvalConfig, section: KarpathySection, source: dict, open_clip: tuple[str, Any] | None = None
) -> dict[str, Any]:
    """One dataset's systems (metrics by row), unavailable rows with reasons, sizes and rejections.

    open_clip: (system name, loaded bundle) of `baselines.open_clip`, or None.
    """
    ds = read_karpathy(
        section.captions_json, section.images_dir, split=section.split,
        captions_per_image=section.captions_per_image, on_missing=section.on_missing,
    )  # fmt: skip
    prompt_sets = read_prompts(section.prompts, ds)
    unavailable: dict[str, str] = {}
    systems = {
        row: karpathy_metrics(sim, ds, tuple(cfg.metrics.ks))
        for row, sim in _systems(cfg, ds, prompt_sets, source, open_clip, unavailable)
    }
    return {
        "systems": systems,
        "unavailable": unavailable,
        "file": str(Path(section.captions_json)),
        "split": section.split,
        "n_images": len(ds.image_paths),
        "n_captions": len(ds.texts),
        "n_captions_beyond_limit": ds.n_captions_beyond_limit,
        "n_images_with_prompts": int(sum(bool(p) for p in prompt_sets)),
        "n_rejected": len(ds.rejections),
        "rejections": [  # the first ones; n_rejected counts them all
            {"entry": r.row, "reason": r.reason, "message": r.message} for r in ds.rejections[:MAX_LISTED]
        ],
    }


def karpathy_benchmarks(cfg: EvalConfig, source: dict, open_clip: tuple[str, Any] | None) -> dict[str, Any]:
    """{"coco": ..., "flickr30k": ...} for the configured datasets (an empty dict when none is)."""
    out = {}
    for key in DATASETS:
        section = getattr(cfg.external, key)
        if section is not None:
            out[key] = karpathy_results(cfg, section, source, open_clip)
            log.info("%s: %d systems scored", DATASETS[key], len(out[key]["systems"]))
    return out
