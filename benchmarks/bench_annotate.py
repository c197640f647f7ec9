"""Benchmark: the phrase-bank matcher and the rules stage, against naive baselines in this process.

Matcher: `PhraseBank.find` (normalised tokens, first-token index) against a baseline that runs one
case-insensitive regex per idiom surface form over the text (exact forms only, so it also finds
fewer inflected idioms; the count of matches found is reported for both).
Rules stage: `RulesStage.annotate_frame` over synthetic generated rows (7 texts per image), in texts/s,
against the baseline of the per-text checks alone (no near-duplicate pass), to show the cost of
the per-image pass.

    .venv/bin/python benchmarks/bench_annotate.py --texts 20000 --repeats 3
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import time

import pandas as pd

from lenses_data.annotation.phrase_bank import default_phrase_bank
from lenses_data.config import PipelineConfig
from lenses_data.config.annotate import AnnotateConfig
from lenses_data.ids import text_id
from lenses_data.schemas import LENS_NAMES
from lenses_data.stages import rules as rules_stage

WORDS = (
    "tree hill fence cloud light shadow river market crowd window lamp street child dog boat bridge wall "
    "stone glass garden storm field road tower coat hand face mirror clock door table"
).split()


def synthetic_texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    bank = default_phrase_bank()
    idioms = [i.text for i in bank.all_idioms()]
    inflect = {"house of cards": "houses of cards", "tipping the scales": "tipped the scales"}
    texts = []
    for k in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(9, 18))]
        if k % 2 == 0:
            idiom = rng.choice(idioms)
            words.insert(rng.randrange(len(words)), inflect.get(idiom, idiom))
        texts.append("A " + " ".join(words) + ".")
    return texts


def regex_baseline():
    forms = [i.text.split(" (")[0] for i in default_phrase_bank().all_idioms()]
    patterns = [re.compile(rf"\b{re.escape(f)}\b", re.IGNORECASE) for f in forms]
    return lambda text: [p.pattern for p in patterns if p.search(text)]


def timed(fn, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def rows_frame(texts: list[str]) -> pd.DataFrame:
    rows = []
    for n, text in enumerate(texts):
        image, lens = f"img{n // 7:06d}", LENS_NAMES[n % 5]
        rows.append(
            dict(
                text_id=text_id(image, "caption", lens, 0, text),
                image_id=image,
                kind="caption",
                lens=lens,
                text=text,
                focus="x",
                idioms=[],
                candidate_index=0,
                prompt_name="captions",
                prompt_hash="0" * 16,
                model="m",
                simulated=False,
                edited=False,
                original_text=None,
                split="train",
            )
        )
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--texts", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    texts = synthetic_texts(args.texts)
    bank, baseline = default_phrase_bank(), regex_baseline()
    t_ours, ours = timed(lambda: [bank.find(t) for t in texts], args.repeats)
    t_base, base = timed(lambda: [baseline(t) for t in texts], args.repeats)
    print("| measure | ours | baseline | ratio |\n|---|---|---|---|")
    print(
        f"| matcher texts/s | {len(texts) / t_ours:,.0f} | {len(texts) / t_base:,.0f} (regex per idiom) | "
        f"{t_base / t_ours:.2f}x |"
    )
    print(
        f"| texts with an idiom found | {sum(bool(m) for m in ours):,} | {sum(bool(m) for m in base):,} | |"
    )
    frame, config = rows_frame(texts), AnnotateConfig()
    t_full, _ = timed(
        lambda: rules_stage.RulesStage(PipelineConfig(annotate=config)).annotate_frame(frame), args.repeats
    )
    no_dups = config.model_copy(update={"max_ngram_similarity": 2.0})  # disables the per-image pass
    t_text, _ = timed(
        lambda: rules_stage.RulesStage(PipelineConfig(annotate=no_dups)).annotate_frame(frame), args.repeats
    )
    print(
        f"| rules stage texts/s | {len(texts) / t_full:,.0f} | {len(texts) / t_text:,.0f} (per-text checks, "
        f"near-duplicate pass off) | {t_text / t_full:.2f}x |"
    )


if __name__ == "__main__":
    main()
