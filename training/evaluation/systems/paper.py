"""Rows of the papers' tables beyond the main evaluation: the ablation lens models (`variants`)
on the evaluated split, and ArtEmis (main Table 5) with every system that can encode it.

Variants are scored with `training.evaluation.evaluate.evaluate_encoded`, imported from below.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from training.evaluation.config import EvalConfig, VariantSection
from training.evaluation.evaluate import evaluate_encoded
from training.evaluation.inputs import encode_in_process, read_encodings
from training.evaluation.lens_models import LENSES_ALL, checkpoint_bundle, lens_models
from training.evaluation.metrics.keys import RSUM
from training.evaluation.metrics.retrieval import retrieval_metrics
from training.evaluation.scoring.similarity import all_lens_text_slots, score_lens_slots
from training.evaluation.scoring.zero_shot import (
    global_mode_scores,
    image_globals_without_prompts,
    zero_shot_systems,
)
from training.evaluation.types import EncodedSplit, SplitLabels

log = logging.getLogger(__name__)

ARTEMIS_FINE_TUNED = "BGE-VL-MLLM (fine-tuned)"


def _variant_encodings(v: VariantSection, cfg: EvalConfig, labels: SplitLabels) -> EncodedSplit:
    from training.evaluation.encode import encode_split

    if v.encodings_dir:
        return read_encodings(v.encodings_dir, labels)
    enc_dir = Path(cfg.out_dir) / "variants" / v.role
    encode_split(v.checkpoint, cfg.export_dir, cfg.split, enc_dir, device="cpu")
    return read_encodings(enc_dir, labels)


def variant_results(cfg: EvalConfig, labels: SplitLabels) -> dict[str, dict[str, Any]]:
    """{role: {protocol: metrics}} of every configured ablation lens model, scored like the main one."""
    if not cfg.variants:
        return {}
    slim = cfg.model_copy(
        update={
            "routing": False,
            "imp": None,
            "baselines": cfg.baselines.model_copy(update={"similarity_ablations": False, "text_only": False}),
        }
    )
    out = {}
    for v in cfg.variants:
        res = evaluate_encoded(_variant_encodings(v, cfg, labels), slim, None, None)
        out[v.role] = {p: next(iter(systems.values())) for p, systems in res["systems"].items()}
        log.info("variant %s evaluated", v.role)
    return out


def _artemis_prompts(table: str | None, ds, wikiart_dir: str) -> list[list[tuple[str, int]]]:
    """Per ArtEmis image: (prompt, lens) from the optional prompts table, ordered by lens."""
    sets: list[list[tuple[str, int]]] = [[] for _ in ds.image_paths]
    if table is None:
        return sets
    import pandas as pd

    from training.external.common import read_csv
    from training.retriever.lenses import lens_index

    cols = ("art_style", "painting", "lens", "text")
    df = (
        pd.read_parquet(table)
        if str(table).endswith(".parquet")
        else read_csv(table, cols, "ArtEmis prompts")
    )
    row_of = {p: i for i, p in enumerate(ds.image_paths)}
    for style, painting, lens, text in zip(*(df[c] for c in cols), strict=True):
        row = row_of.get(str(Path(wikiart_dir) / str(style) / f"{painting}.jpg"))
        if row is not None:
            sets[row].append((str(text), lens_index(str(lens))))
    return [sorted(s, key=lambda p: p[1]) for s in sets]


def _lens_scores(bundle, ds, prompt_sets, cfg: EvalConfig) -> np.ndarray:
    retriever, processor, data_cfg = bundle
    n = len(ds.image_paths)
    labels = SplitLabels(
        ds.image_paths, ds.image_paths, [str(i) for i in range(len(ds.texts))], list(ds.texts),
        ds.caption_image, ds.caption_lens, prompt_sets, [], np.zeros(0, np.int64), np.zeros(0, np.int64),
    )  # fmt: skip
    enc = encode_in_process(retriever, processor, data_cfg, labels)
    s = cfg.scoring
    return score_lens_slots(
        enc.img_slots, enc.img_slot_lens, enc.img_global, enc.txt_slots, enc.txt_global,
        txt_slot_lens=all_lens_text_slots(len(ds.texts)), alpha=s.alpha, denominator=s.denominator,
        fallback=s.fallback, image_chunk=min(s.image_chunk, max(n, 1)), text_chunk=s.text_chunk,
    )  # fmt: skip


def fine_tuned_scores(checkpoint: str, labels: SplitLabels, texts: list[str] | None = None) -> np.ndarray:
    """The global-only fine-tuned BGE-VL-MLLM on the evaluated split, encoded from its checkpoint.
    texts: the texts to score (default the split's captions)."""
    retriever, processor, data_cfg = checkpoint_bundle(checkpoint)
    texts = labels.captions if texts is None else texts
    return global_mode_scores(retriever, processor, data_cfg, labels.image_paths, texts)


def artemis_results(cfg: EvalConfig, source: dict) -> dict[str, Any]:
    """Main Table 5: ArtEmis I->T and T->I R@K of the zero-shot rows and of the fine-tuned models."""
    from training.external.artemis import read_artemis

    a = cfg.external.artemis
    ds = read_artemis(a.csv, a.wikiart_dir, on_missing=a.on_missing, split=a.split)
    scores, unavailable = zero_shot_systems(cfg.baselines.zero_shot, ds.image_paths, ds.texts)
    if cfg.baselines.global_only_checkpoint:
        retriever, processor, data_cfg = checkpoint_bundle(cfg.baselines.global_only_checkpoint)
        scores[ARTEMIS_FINE_TUNED] = global_mode_scores(
            retriever, processor, data_cfg, ds.image_paths, ds.texts
        )
    else:
        unavailable[ARTEMIS_FINE_TUNED] = "baselines.global_only_checkpoint not set"
    loaders, reasons = lens_models(cfg, source)
    unavailable.update(reasons)
    prompt_sets = _artemis_prompts(a.prompts, ds, a.wikiart_dir)
    for row, load in loaders.items():
        scores[row] = _lens_scores(load(), ds, prompt_sets, cfg)
    systems = {}
    for row, sim in scores.items():
        m = retrieval_metrics(sim, ds.caption_image, ds.caption_lens, ks=cfg.metrics.ks)
        systems[row] = {k: v for k, v in m.items() if k.startswith("all/") or k == RSUM}
    return {
        "systems": systems,
        "unavailable": unavailable,
        "n_images": len(ds.image_paths),
        "n_captions": len(ds.texts),
        "n_rejected_rows": len(ds.rejections),
        "n_images_with_prompts": int(sum(bool(p) for p in prompt_sets)),
    }


@torch.no_grad()
def _image_globals_without_prompts(bundle, image_paths: list[str], batch_size: int = 8) -> torch.Tensor:
    from training.loop.inputs import Collator

    retriever, processor, data_cfg = bundle
    retriever.eval()
    collator = Collator(processor, data_cfg, lens_mode=True)
    return image_globals_without_prompts(retriever, collator, data_cfg, image_paths, batch_size)


def global_without_prompts(
    results: dict[str, Any], cfg: EvalConfig, labels: SplitLabels, source: dict, txt_global: torch.Tensor
) -> None:
    """Supp. Table 3's "Global only (w/o prompts)": the lens model's global image embedding of an
    input without any image-side prompt against the same caption globals (a second image pass)."""
    from training.baselines.global_only import global_scores

    row = "Global only (w/o prompts)"
    if "ablations" not in results:
        return
    loaders, reasons = lens_models(cfg.model_copy(update={"variants": []}), source)
    if LENSES_ALL not in loaders:
        results.setdefault("ablation_notes", {})[row] = f"unavailable: {reasons[LENSES_ALL]}"
        return
    img = _image_globals_without_prompts(loaders[LENSES_ALL](), labels.image_paths)
    protocol = next((p for p in cfg.metrics.protocols if p != "lens_slot"), "lens_gallery")
    sim = global_scores(img, txt_global)
    m = retrieval_metrics(
        sim, labels.caption_image, labels.caption_lens, ks=cfg.metrics.ks, protocol=protocol
    )
    results["ablations"] = {row: m, **results["ablations"]}


def add_paper_results(
    results: dict[str, Any], cfg: EvalConfig, labels: SplitLabels, source: dict, unavailable: dict[str, str],
    txt_global: torch.Tensor | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Adds `zero_shot` (configured rows, unavailable ones with reasons), `variants` and `artemis`."""
    results["zero_shot"] = {"rows": [e.row for e in cfg.baselines.zero_shot], "unavailable": unavailable}
    results["variants"] = variant_results(cfg, labels)
    if txt_global is not None:
        global_without_prompts(results, cfg, labels, source, txt_global)
    if cfg.external.artemis is not None:
        results["artemis"] = artemis_results(cfg, source)
    return results
