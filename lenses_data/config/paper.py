"""The Lenses paper's numbers that the pipeline uses, written once (001 = main paper, in shared/seeds):
Table 1's counts by split, the filter's pass share, and what derives from them. The split's
production sizes (config/dedupe.py), the simulator's defaults (config/simulator.py), the yield bands
(config/yields.py), the plan's "paper" yields and the filter's report read them from here.
"""

from __future__ import annotations

from lenses_data.schemas import LENS_NAMES

# 001 Table 1: images, captions and captions per lens, by split.
TABLE1: dict[str, dict[str, int]] = {
    "train": {"images": 99_069, "captions": 686_469, "Literal": 137_034, "Figurative": 161_126,
              "Abstract": 148_652, "Background": 112_111, "Emotional": 127_546},
    "valid": {"images": 1_100, "captions": 7_677, "Literal": 1_526, "Figurative": 1_799,
              "Abstract": 1_654, "Background": 1_269, "Emotional": 1_429},
    "test": {"images": 5_500, "captions": 38_259, "Literal": 7_613, "Figurative": 8_950,
             "Abstract": 8_262, "Background": 6_306, "Emotional": 7_128},
    "total": {"images": 105_669, "captions": 732_405, "Literal": 146_173, "Figurative": 171_875,
              "Abstract": 158_568, "Background": 119_686, "Emotional": 136_103},
}  # fmt: skip

# 001 Sec. 3.1: "Approximately 10% of candidates pass this filtering stage, yielding 105,669 diverse
# images" (002 and the supplementary say the same; no paper states the candidate count). The share
# is the stated fact; the candidates are derived from it: 105,669 / 0.10 = 1,056,690. (An older
# `PAPER` assumed a round 1,000,000 candidates, which made the pass share 10.6%, a number no paper
# gives, while the filter's report said 10%.)
FILTER_PASS_SHARE = 0.10

# The paper's funnel: candidates -> 105,669 images, split 99,069 / 1,100 / 5,500, with 732,405
# captions (the plan's "paper" yields, the yield bands).
PAPER = {
    "candidates": round(TABLE1["total"]["images"] / FILTER_PASS_SHARE),
    "images": TABLE1["total"]["images"],
    "test_images": TABLE1["test"]["images"],
    "captions": TABLE1["total"]["captions"],
}


def table1_density(split: str = "total") -> float:
    """Captions per image of a Table 1 split (6.93 over the whole dataset)."""
    return TABLE1[split]["captions"] / TABLE1[split]["images"]


def table1_lens_share(split: str = "total") -> dict[str, float]:
    """Share of each lens among a Table 1 split's captions."""
    row = TABLE1[split]
    return {lens: row[lens] / row["captions"] for lens in LENS_NAMES}
