"""The tables of the evaluation harnesses, for `paper_tables.paper_tables_markdown`: main Table 6,
supp. Tables 6, 7 and 9 (each marked "not run" with what to configure when it was not run)."""

from __future__ import annotations

from training.baselines.clip_finetune import supp_table9
from training.evaluation.backbone_scaling import main_table6, supp_table7
from training.evaluation.generator_swap import supp_table6


def harness_tables(results: dict) -> list[str]:
    return [main_table6(results), supp_table6(results), supp_table7(results), supp_table9(results)]
