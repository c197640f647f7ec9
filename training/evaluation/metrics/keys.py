"""The names of the summary metrics in a results dict, written once: the metrics that compute them
(`topk`, `retrieval`), the runs that filter them (`systems/paper`, `external/karpathy`), the tables
that lay them out (`tables/`) and the CLI's summary line (`run`) all import them from here.

Per-direction recalls are keyed `<scope>/<direction>/R@<k>` (scope `all`, a lens key or `macro`).
"""

from __future__ import annotations

LC10 = "LC@10"  # LensCoverage@10
ALL10 = "All@10"  # AllLenses@10
LENS_DCG10 = "LensDCG@10"
CAPTION_DCG10 = "CaptionDCG@10"
MAP_R = "mAP@R"
RSUM = "RSUM"  # the sum of I->T and T->I R@1, R@5, R@10

# Main Table 4's columns, in the paper's order, and how the papers' tables head them.
DIVERSITY_KEYS = (LC10, ALL10, LENS_DCG10, CAPTION_DCG10)
TITLES = {LENS_DCG10: "Lens DCG@10", CAPTION_DCG10: "Caption DCG@10"}


def title(key: str) -> str:
    """A metric's column title in the papers' tables (its key where the paper writes it so)."""
    return TITLES.get(key, key)
