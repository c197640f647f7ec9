"""Benchmark: what the simulator produces through the real text stages, next to the paper.

Runs the production generate, rules, validate and visual-validate stages (real model client, HTTP
on 127.0.0.1) against the built-in simulator over N distinct images (a third in the test split),
and prints captions and prompts per image, lens mix and mean words by lens as ratios to the
targets: Table 1 (main paper) for density and mix, the published examples (supplementary Figs.
5-7) for words, the configured rates for the validators. Ends with a Markdown section for
docs/benchmarks.md.

    .venv/bin/python benchmarks/bench_simulator_mix.py --images 600
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from lenses_data.annotation.prompts import TEXT_VALIDATION, VISUAL_VALIDATION
from lenses_data.config.paper import table1_density, table1_lens_share
from lenses_data.config.simulator import EXAMPLE_WORDS, SimContentSettings
from lenses_data.schemas import LENS_NAMES
from lenses_data.simulator.simreport import mix_report, run_text_stages


def density_rows(report: dict) -> list[str]:
    rows = []
    for kind in ("caption", "prompt"):
        gen, final = report[kind]["generated"]["per_image"], report[kind]["final"]["per_image"]
        rows.append(
            f"| {kind}s per image | {gen:.2f} | {final:.2f} | {table1_density():.2f} | "
            f"{final / table1_density():.3f} |"
        )
    return rows


def mix_rows(report: dict) -> list[str]:
    target = table1_lens_share()
    rows = []
    for lens in LENS_NAMES:
        cap = report["caption"]["final"]["lens_share"][lens]
        pro = report["prompt"]["final"]["lens_share"][lens]
        rows.append(
            f"| {lens} | {100 * cap:.1f}% | {100 * pro:.1f}% | {100 * target[lens]:.1f}% | "
            f"{cap / target[lens]:.3f} |"
        )
    return rows


def word_rows(report: dict) -> list[str]:
    rows = []
    for lens in LENS_NAMES:
        cells = []
        for kind in ("caption", "prompt"):
            got, want = report[kind]["final"]["mean_words_by_lens"][lens], EXAMPLE_WORDS[kind][lens]
            cells.append(f"{got:.1f} / {want:.1f} ({got / want:.2f})")
        rows.append(f"| {lens} | {cells[0]} | {cells[1]} |")
    return rows


def validator_rows(report: dict) -> list[str]:
    rates = SimContentSettings()
    rows = []
    for stage, prefix in ((TEXT_VALIDATION, "text"), (VISUAL_VALIDATION, "visual")):
        for what in ("discarded", "edited"):
            want = getattr(rates, f"{prefix}_{'discard' if what == 'discarded' else 'edit'}_rate")
            got = [report[kind][stage][what] for kind in ("caption", "prompt")]
            rows.append(f"| {stage} {what} | {100 * got[0]:.1f}% | {100 * got[1]:.1f}% | {100 * want:.1f}% |")
    return rows


def section(report: dict, seconds: float) -> str:
    lines = [
        "## Simulator vs the paper (benchmarks/bench_simulator_mix.py)",
        "",
        f"{report['images']} simulated images through the real generate, rules, validate and visual-validate "
        f"stages ({seconds:.0f} s). Targets: main paper Table 1 (6.93 captions per image, lens mix of the "
        "Total row); words: mean of the published examples (supplementary Figs. 5-6 captions, Fig. 7 "
        "prompts); validator rates: lenses_data.config.simulator (the paper states none).",
        "",
        "| texts | generated | final | Table 1 | final / Table 1 |",
        "|---|---|---|---|---|",
        *density_rows(report),
        "",
        "| lens | captions | prompts | Table 1 | captions / Table 1 |",
        "|---|---|---|---|---|",
        *mix_rows(report),
        "",
        "| mean words, simulated / examples (ratio) | captions | prompts |",
        "|---|---|---|",
        *word_rows(report),
        "",
        "| validator | captions | prompts | configured |",
        "|---|---|---|---|",
        *validator_rows(report),
        "",
        f"Rule rejections: {report['rule_reasons']}; rules kept {100 * report['caption']['rules_kept']:.1f}% "
        f"of captions and {100 * report['prompt']['rules_kept']:.1f}% of prompts.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=600)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        frames = run_text_stages(Path(tmp), args.images)
        seconds = time.perf_counter() - start
    print(section(mix_report(frames), seconds))


if __name__ == "__main__":
    main()
