"""IMP Table 2 (mean AUPRC with error bars) and Table 11 (CLIPscore per difficulty), seed 003.

- Table 2: "We report the mean AUPRC of the seven models on IMP with error bars" (Sec. 4): one
  AUPRC per model and difficulty (IMP Table 5's numbers, `imp.<system>.<difficulty>/AUPRC`),
  then their mean and spread **over the models**. The paper does not say what the bars are;
  here they are the sample standard deviation over models (ddof=1). The models averaged are, by
  default, IMP's "seven CLIP models", the split's voters and tie-breaker (`imp.models`, scored in
  `training.evaluation.imp.split_models`), or the run's `baselines.zero_shot` rows
  (`imp.table2_models: zero_shot`); `imp_table2.models` lists them, `imp_table2.source` says which.
- Table 11: "CLIP-ViT/B-32 (trained on CLIP400M) as the CLIPscore model" (App. J), reported
  as mean +- std per category (Full IMP 0.25 +- 0.03, Easy 0.28, Medium 0.25, Hard 0.22). Those
  values and the per-caption examples of its Fig. 25 (0.19-0.30) are on the cosine scale, so
  the seed's CLIPscore is the image-caption cosine clipped at 0, not Hessel et al.'s
  2.5 * max(cos, 0) (which would put Full IMP near 0.6); `clip_score` takes the weight, 1 by
  default. The cosines are the ones the IMP split already computed for every voter
  (`score/<model>` in `imp/difficulty.parquet`), so there is one column per voter; the
  ViT-B/32 voter's is the paper's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from training.evaluation.imp.metrics import DIFFICULTIES

CLIPSCORE_WEIGHT = 1.0  # the seed's scale (cosine); Hessel et al.'s CLIPScore uses 2.5
GROUPS = ("full", *DIFFICULTIES)


def clip_score(cosines: Any, weight: float = CLIPSCORE_WEIGHT) -> np.ndarray:
    """[n] image-caption cosines -> [n] CLIPscores, weight * max(cos, 0)."""
    return weight * np.clip(np.asarray(cosines, dtype=np.float64), 0.0, None)


def mean_and_spread(values: Any, ddof: int) -> dict[str, float]:
    """[n] values (NaN dropped) -> {mean, std, n}; NaN statistics when too few values remain."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    mean = float(v.mean()) if v.size else float("nan")
    std = float(v.std(ddof=ddof)) if v.size > ddof else float("nan")
    return {"mean": mean, "std": std, "n": int(v.size)}


def clipscore_by_difficulty(
    cosines: Any, difficulty: Sequence[str], weight: float = CLIPSCORE_WEIGHT
) -> dict:
    """[n] cosines of true pairs, [n] difficulty names -> {full|easy|medium|hard: {mean, std, n}}.

    `full` is every pair with a difficulty (IMP's "Full IMP"); std over pairs (ddof=0)."""
    scores = clip_score(cosines, weight)
    diff = np.asarray(difficulty, dtype=object)
    if scores.shape != diff.shape:
        raise ValueError(f"{scores.shape[0]} cosines but {diff.shape[0]} difficulty labels")
    labelled = np.isin(diff, DIFFICULTIES)
    out = {"full": mean_and_spread(scores[labelled], ddof=0)}
    out.update({d: mean_and_spread(scores[diff == d], ddof=0) for d in DIFFICULTIES})
    return out


def clipscore_table(table: pd.DataFrame, caption_ids: Sequence[str] | None = None) -> dict[str, dict]:
    """IMP Table 11 from a difficulty table (`lenses imp-split`): {voter: clipscore_by_difficulty}.

    caption_ids: keep only these captions (the evaluated split); None keeps every row."""
    if caption_ids is not None:
        table = table[table["text_id"].astype(str).isin(set(map(str, caption_ids)))]
    columns = [c for c in table.columns if c.startswith("score/")]
    if not columns:
        raise ValueError("the IMP difficulty table has no score/<model> columns (per-pair cosines)")
    diff = table["difficulty"].astype(str).to_numpy()
    return {c.removeprefix("score/"): clipscore_by_difficulty(table[c].to_numpy(), diff) for c in columns}


def auprc_over_models(imp: dict[str, dict[str, float]], models: Sequence[str]) -> dict[str, Any]:
    """IMP Table 2: per difficulty (and all), mean and sample std (ddof=1) of the models' AUPRC."""
    present = [m for m in models if m in imp]
    out: dict[str, Any] = {"models": present}
    for group in ("easy", "medium", "hard", "all"):
        out[group] = mean_and_spread([imp[m].get(f"{group}/AUPRC", np.nan) for m in present], ddof=1)
    return out


def add_imp_aggregates(results: dict, table2: dict | None, difficulty_path: str | None,
                       caption_ids: Sequence[str]) -> None:  # fmt: skip
    """Adds `imp_table2` (given, from `split_models.imp_table2`) and `imp_table11` (needs the
    difficulty table)."""
    if table2 is not None:
        results["imp_table2"] = table2
    if difficulty_path is not None:
        table = pd.read_parquet(difficulty_path)
        if any(c.startswith("score/") for c in table.columns):
            results["imp_table11"] = clipscore_table(table, caption_ids)
        else:  # a difficulty table from elsewhere (imp.difficulty_table) may carry labels only
            results["imp_table11"] = {"unavailable": f"{difficulty_path} has no score/<model> columns"}


def _finite(x: Any) -> bool:
    return x is not None and bool(np.isfinite(x))  # metrics.json stores NaN as null


def _pm(stats: dict[str, float], digits: int) -> str:
    if not _finite(stats["mean"]):
        return "-"
    std = f"{stats['std']:.{digits}f}" if _finite(stats["std"]) else "-"
    return f"{stats['mean']:.{digits}f} ± {std}"


def imp_aggregates_markdown(results: dict) -> list[str]:
    """report.md sections for IMP Tables 2 and 11 (empty when the run has neither)."""
    from training.evaluation.markdown import table

    parts: list[str] = []
    t2 = results.get("imp_table2")
    if t2 and "unavailable" in t2:
        parts += [f"## IMP Table 2: mean AUPRC over models\n\nunavailable: {t2['unavailable']}"]
    elif t2:
        rows = [[g.title(), _pm(t2[g], 3), str(t2[g]["n"])] for g in ("easy", "medium", "hard", "all")]
        source = t2.get("source", "the zero-shot models")
        parts += [
            f"## IMP Table 2: mean AUPRC ± sample std over {source} ({', '.join(t2['models']) or 'none'})",
            table(["Difficulty", "AUPRC mean ± std", "models"], rows),
        ]
    t11 = results.get("imp_table11")
    if t11 and "unavailable" in t11:
        parts += [f"## IMP Table 11: CLIPscore per difficulty\n\nunavailable: {t11['unavailable']}"]
    elif t11:
        titles = {"full": "Full IMP", "easy": "Easy", "medium": "Medium", "hard": "Hard"}
        models = list(t11)
        rows = [
            [titles[g], *(_pm(t11[m][g], 2) for m in models), str(t11[models[0]][g]["n"])] for g in GROUPS
        ]
        parts += [
            "## IMP Table 11: CLIPscore = max(cos, 0) of true pairs, mean ± std per difficulty, per voter "
            "(the paper's is CLIP ViT-B/32, OpenAI weights)",
            table(["Category", *(f"CLIPscore {m}" for m in models), "pairs"], rows),
        ]
    return parts
