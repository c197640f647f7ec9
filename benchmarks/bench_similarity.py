"""Benchmark: vectorised, chunked lens_similarity vs a per-pair loop over the same function.

Both run in this process on the same random sets (8 image slots with padding, 5 caption slots
with one active, as in training). Prints pairs/s and the speed ratio, and writes
docs/benchmarks.md. Run: `python benchmarks/bench_similarity.py`.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from training.retriever.similarity import lens_similarity


def random_sets(n_img: int, n_txt: int, d: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    img_lens = torch.randint(0, 5, (n_img, 8), generator=g)
    img_lens[torch.rand(n_img, 8, generator=g) < 0.25] = -1
    labels = torch.randint(0, 5, (n_txt,), generator=g)
    txt_lens = torch.full((n_txt, 5), -1)
    txt_lens[torch.arange(n_txt), labels] = labels
    return (
        torch.randn(n_img, 8, d, generator=g), img_lens, torch.randn(n_img, d, generator=g),
        torch.randn(n_txt, 5, d, generator=g), txt_lens, torch.randn(n_txt, d, generator=g),
    )  # fmt: skip


def per_pair(inputs) -> torch.Tensor:
    vs, vl, gv, us, ul, gu = inputs
    out = torch.empty(vs.shape[0], us.shape[0])
    for b in range(vs.shape[0]):
        for n in range(us.shape[0]):
            out[b, n] = lens_similarity(
                vs[b : b + 1], vl[b : b + 1], gv[b : b + 1], us[n : n + 1], ul[n : n + 1], gu[n : n + 1]
            )[0, 0]
    return out


def timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def main() -> None:
    torch.set_num_threads(1)
    small = random_sets(32, 64, 256)
    ref, t_loop = timed(per_pair, small)
    vec, t_vec = timed(lambda x: lens_similarity(*x), small)
    assert torch.allclose(ref, vec, atol=1e-5)
    big = random_sets(1024, 4096, 256, seed=1)
    _, t_big = timed(lambda x: lens_similarity(*x), big)
    loop_rate, vec_rate, big_rate = 32 * 64 / t_loop, 32 * 64 / t_vec, 1024 * 4096 / t_big
    lines = [
        "## Training: lens-masked smooth-Chamfer similarity (benchmarks/bench_similarity.py)",
        "",
        "CPU, 1 thread, d=256, 8 image slots (25% padding), 5 caption slots (1 active), float32.",
        "",
        "| variant | pairs | seconds | pairs/s |",
        "|---|---|---|---|",
        f"| per-pair loop (baseline) | {32 * 64} | {t_loop:.3f} | {loop_rate:,.0f} |",
        f"| vectorised, chunked | {32 * 64} | {t_vec:.4f} | {vec_rate:,.0f} |",
        f"| vectorised, chunked | {1024 * 4096:,} | {t_big:.2f} | {big_rate:,.0f} |",
        "",
        f"Speed-up of the vectorised form over the per-pair baseline (same process, same pairs): "
        f"**{vec_rate / loop_rate:,.0f}x** (large matrix: {big_rate / loop_rate:,.0f}x).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(__file__).resolve().parents[1] / "docs" / "parts" / "benchmarks-training.md"
    out.write_text(text)


if __name__ == "__main__":
    main()
