"""What the dataset card says about the final texts: idiom use by lens and phrase-bank family, the
per-image idiom target, rule flags on kept texts, and caption diversity."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from lenses_data.annotation import rules
from lenses_data.annotation.phrase_bank import default_phrase_bank
from lenses_data.config.annotate import IDIOM_TARGET_SHARE
from lenses_data.schemas import LENS_NAMES

DIVERSITY_SAMPLE = 2000  # images used for the within-image similarity (pairwise, so bounded)


def idiom_tables(captions: pd.DataFrame, prompts: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Share of texts with a phrase-bank idiom per lens; idiom uses per family and lens."""
    bank = default_phrase_bank()
    shares, families = [], Counter()
    for lens in LENS_NAMES:
        row: dict[str, Any] = {"Lens": lens}
        for noun, texts in (("captions", captions), ("prompts", prompts)):
            part = texts[texts["lens"].astype(str) == lens]
            idiomatic = int(sum(len(v) > 0 for v in part["idioms"]))
            row[f"Idiomatic {noun}"] = f"{idiomatic}/{len(part)}"
            for idioms in part["idioms"]:
                families.update((bank.family_of(i), lens) for i in idioms)
        shares.append(row)
    names = [name for name, _, _ in bank.families] + [bank.add_ons_name]
    family_rows = [{"Family": f, **{lens: families.get((f, lens), 0) for lens in LENS_NAMES}} for f in names]
    return pd.DataFrame(shares), pd.DataFrame(family_rows)


def idiom_target_line(
    captions: pd.DataFrame, prompts: pd.DataFrame, share: float = IDIOM_TARGET_SHARE
) -> str:
    """How many images reach the per-image idiom target (Listing 2: 40 percent, rounded up)."""
    parts = []
    for noun, texts in (("captions", captions), ("prompts", prompts)):
        if texts.empty:
            continue
        per_image = texts.assign(_idiomatic=[len(v) > 0 for v in texts["idioms"]]).groupby("image_id")[
            "_idiomatic"
        ]
        met = sum(int(g.sum()) >= rules.idiom_target(len(g), share) for _, g in per_image)
        parts.append(f"{met:,} of {per_image.ngroups:,} images by {noun}")
    return f"Images with at least {share:.0%} idiomatic texts (rounded up): " + "; ".join(parts) + "."


def flag_table(captions: pd.DataFrame, prompts: pd.DataFrame) -> pd.DataFrame:
    """Kept texts per kind, flag code and lens that break a rule which did not reject them."""
    rows = []
    for noun, texts in (("Captions", captions), ("Prompts", prompts)):
        if texts.empty or "flags" not in texts.columns:
            continue
        exploded = texts.assign(flag=texts["flags"].map(list)).explode("flag").dropna(subset=["flag"])
        for code, group in exploded.groupby("flag"):
            lens_counts = group["lens"].astype(str).value_counts()
            row = {"Texts": noun, "Flag": code, **{n: int(lens_counts.get(n, 0)) for n in LENS_NAMES}}
            rows.append({**row, "Total": f"{len(group):,}/{len(texts):,}"})
    return pd.DataFrame(rows, columns=["Texts", "Flag", *LENS_NAMES, "Total"])


def _caption_table(captions: pd.DataFrame | pa.Table) -> pa.Table:
    if isinstance(captions, pa.Table):
        return captions.select(["image_id", "text"])
    return pa.Table.from_pandas(captions[["image_id", "text"]], preserve_index=False)


def diversity(captions: pd.DataFrame | pa.Table) -> pd.DataFrame:
    """Lexical diversity of captions: length, vocabulary, distinct-n, within-image similarity."""
    # One caption at a time, from Arrow batches: only the distinct words and n-grams are kept, never
    # every caption's token list nor every text as a Python object (at 100k candidates either was
    # the export's memory peak).
    table = _caption_table(captions)
    count, words, vocabulary = 0, 0, set()
    distinct: dict[int, set] = {1: set(), 2: set()}
    grams = dict.fromkeys(distinct, 0)
    for batch in table.select(["text"]).to_batches(max_chunksize=4096):
        for text in batch.column(0).to_pylist():
            tokens = [w.lower() for w in rules.words(text)]
            count, words = count + 1, words + len(tokens)
            vocabulary.update(tokens)
            for n, seen in distinct.items():
                seen.update(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))
                grams[n] += max(0, len(tokens) - n + 1)
    stats: dict[str, Any] = {"Captions": count}
    stats["Mean words"] = float(words / count) if count else float("nan")
    stats["Vocabulary"] = len(vocabulary)
    for n, seen in distinct.items():
        stats[f"Distinct-{n}"] = len(seen) / grams[n] if grams[n] else float("nan")
    sims = []
    sample = sorted(pc.unique(table["image_id"]).to_pylist())[:DIVERSITY_SAMPLE]
    chosen = table.filter(pc.is_in(table["image_id"], value_set=pa.array(sample, pa.string())))
    for _, group in chosen.to_pandas().groupby("image_id")["text"]:
        items = list(group)
        sims += [rules.ngram_similarity(a, b) for i, a in enumerate(items) for b in items[i + 1 :]]
    stats["Mean within-image overlap"] = float(sum(sims) / len(sims)) if sims else float("nan")
    return pd.DataFrame([stats])
