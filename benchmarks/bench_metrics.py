"""Evaluation at full Lenses test-set shape: scoring + every metric, time and peak memory.

Shape: 5,500 images x 38,259 captions (about 7 per image), about 7 active image slots of up to
9, five text slots per caption. Hidden size 256 stands in for 4,096 by default (`--dim`): the
lens-slot GEMMs scale linearly in d and 4,096 would take ~16x longer on a 2-core CPU; the
metrics do not depend on d at all.

Baselines (same process, run after ours so they cannot lower our peak), scaled up linearly:
full-row/column stable `np.argsort` rankings on `--ref-fraction` (10%) of the image rows and
caption columns for the metrics, and `training.retriever.similarity.lens_similarity` (the einsum over all
image-slot x text-slot pairs) on `--ref-scoring-fraction` (1%) of the images for scoring: at
10% the einsum alone would take ~10 minutes on this machine.

    .venv/bin/python benchmarks/bench_metrics.py [--dim 256] [--out /tmp/benchmarks-eval.md (then paste into docs/benchmarks.md)]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import time
from pathlib import Path

import numpy as np
import torch

from training.evaluation.metrics.retrieval import retrieval_metrics
from training.evaluation.metrics.routing import fallback_rates, routing_matrix
from training.evaluation.scoring.similarity import all_lens_text_slots, score_lens_slots


def make_data(n_img: int, n_txt: int, dim: int, max_slots: int, seed: int = 0):
    """Encodings with signal: a caption's lens slot is its image's same-lens slot plus noise."""
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    slot_lens = torch.as_tensor(rng.integers(0, 5, size=(n_img, max_slots)))
    slot_lens[torch.as_tensor(rng.random((n_img, max_slots)) < 2 / max_slots)] = -1  # ~7 active
    img_slots = torch.randn(n_img, max_slots, dim, generator=g)
    img_global = torch.randn(n_img, dim, generator=g)
    caption_image = np.sort(rng.integers(0, n_img, size=n_txt))
    caption_lens = rng.integers(0, 5, size=n_txt)
    txt_slots = torch.randn(n_txt, 5, dim, generator=g)
    # Pull each caption's own-lens slot towards a same-lens slot of its image when one exists.
    first_slot = torch.full((n_img, 5), -1, dtype=torch.long)
    for k in range(5):
        has = (slot_lens == k).any(1)
        first_slot[has, k] = (slot_lens == k).float().argmax(1)[has]
    src = first_slot[torch.as_tensor(caption_image), torch.as_tensor(caption_lens)]
    ok = src >= 0
    rows = torch.nonzero(ok)[:, 0]
    txt_slots[rows, torch.as_tensor(caption_lens)[rows]] += (
        1.5 * img_slots[torch.as_tensor(caption_image)[rows], src[rows]]
    )
    txt_global = 0.5 * img_global[torch.as_tensor(caption_image)] + torch.randn(n_txt, dim, generator=g)
    return img_slots, slot_lens, img_global, txt_slots, txt_global, caption_image, caption_lens


def reference_metrics(sim: np.ndarray, caption_image: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> None:
    """Straightforward rankings: a full stable argsort per image row and per caption column."""
    for i in rows:
        order = np.argsort(-sim[i], kind="stable")
        hit = caption_image[order] == i
        _ = hit[:10].any(), np.argmax(hit)
    for j in cols:
        order = np.argsort(-sim[:, j], kind="stable")
        _ = np.nonzero(order == caption_image[j])[0][0]


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: KiB


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=5500)
    ap.add_argument("--captions", type=int, default=38259)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--slots", type=int, default=9)
    ap.add_argument(
        "--ref-fraction", type=float, default=0.1, help="rows/columns ranked by the argsort baseline"
    )
    ap.add_argument(
        "--ref-scoring-fraction",
        type=float,
        default=0.01,
        help="images scored by the all-pairs einsum baseline",
    )
    ap.add_argument("--out", default=None, help="write the markdown section here")
    args = ap.parse_args()

    data = make_data(args.images, args.captions, args.dim, args.slots)
    img_slots, slot_lens, img_global, txt_slots, txt_global, ci, cl = data
    base_rss = peak_rss_gib()
    t = {}
    t0 = time.perf_counter()
    sim = score_lens_slots(img_slots, slot_lens, img_global, txt_slots, txt_global)
    t["scoring"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    m = retrieval_metrics(sim, ci, cl)
    t["metrics (lens_gallery)"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    retrieval_metrics(sim, ci, cl, protocol="full_gallery")
    t["metrics (full_gallery)"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    fallback_rates(slot_lens, all_lens_text_slots(len(ci)), ci, cl)
    routing_matrix(img_slots, slot_lens, txt_slots, ci, cl)
    t["fallback + routing"] = time.perf_counter() - t0
    ours_peak = peak_rss_gib()

    # Straightforward baseline on a subset, scaled up to the full shape.
    from training.retriever.similarity import lens_similarity

    n_ref_img = max(1, int(args.images * args.ref_scoring_fraction))
    t0 = time.perf_counter()
    lens_similarity(img_slots[:n_ref_img], slot_lens[:n_ref_img], img_global[:n_ref_img],
                    txt_slots, all_lens_text_slots(len(ci)), txt_global)  # fmt: skip
    ref_scoring = (time.perf_counter() - t0) * args.images / n_ref_img
    rows = np.arange(max(1, int(args.images * args.ref_fraction)))
    cols = np.arange(0, len(ci), int(round(1 / args.ref_fraction)))
    t0 = time.perf_counter()
    reference_metrics(sim, ci, rows, cols)
    ref_metrics = (time.perf_counter() - t0) / args.ref_fraction
    ours_metrics = t["metrics (lens_gallery)"]

    lines = [
        "## Evaluation at full test-set shape (bench_metrics.py)",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads; "
        f"shape {args.images} images x {args.captions} captions, {float((slot_lens >= 0).sum(1).float().mean()):.1f} "
        f"active image slots per image (of {args.slots}), 5 text slots, d = {args.dim} "
        "(stand-in for 4,096: scoring work is linear in d, metrics do not depend on d).",
        "",
        "| step | seconds |",
        "|---|---|",
        *[f"| {k} | {v:.1f} |" for k, v in t.items()],
        "",
        f"Peak RSS of our evaluation: {ours_peak:.2f} GiB (data alone: {base_rss:.2f} GiB; limit 8 GiB). "
        f"1-minute load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
        "(other jobs share the machine; wall times scale with it).",
        "",
        f"Straightforward baselines, scaled up linearly: all-pairs einsum scoring "
        f"(`training.retriever.similarity.lens_similarity`) on {n_ref_img} images ({args.ref_scoring_fraction:.0%}); "
        f"argsort rankings on {args.ref_fraction:.0%} of the image rows and caption columns:",
        "",
        "| part | ours (s) | straightforward (s, scaled) | speed-up |",
        "|---|---|---|---|",
        f"| scoring (per-lens GEMMs vs all-slot-pairs einsum) | {t['scoring']:.1f} | {ref_scoring:.1f} | "
        f"{ref_scoring / t['scoring']:.1f}x |",
        f"| ranking: all metrics vs argsort rankings only | {ours_metrics:.1f} | {ref_metrics:.1f} | "
        f"{ref_metrics / ours_metrics:.1f}x |",
        "",
        f"Sanity: all I->T R@1 {m['all/i2t/R@1']:.1f}, T->I R@1 {m['all/t2i/R@1']:.1f}, LC@10 {m['LC@10']:.1f}.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
