"""GPU-hour projection of a build from a run's journals (`lenses plan`).

A run's per-shard journals give, per model stage, the requests and their prompt and completion
tokens; its stage markers give the funnel (candidates -> images the filter saw -> images selected
-> test images). A plan scales each stage's measured volume to a target candidate count, either at
the run's own yields or at the paper's (Table 1: 105,669 images of ~1M candidates, 5,500 in test),
and prices it with a throughput table (`configs/throughput-h200.yaml`):

    GPU-hours = (uncached prompt + image tokens) / prefill tok/s + encoded tiles / tiles/s
                + (completion tokens - one per request) / decode tok/s, per replica, x GPUs per replica

(the first completion token comes out of the prefill pass). Every number of the table and the
assumptions can be overridden; the plan lists them all, so its JSON can go in the dataset card.

Modules: `schemas` (the table, funnel and plan models), `throughput` (the table and the roofline's
per-replica rates), `usage` (what a run's journals and markers measured), `build` (the plan), `training` (training's share, from a rehearsal's JSON or documented figures).
"""

from lenses_data.plan.build import assumption_lines, build_plan, plan_for_card, plan_stage, stage_scale
from lenses_data.plan.schemas import (
    Assumptions,
    Funnel,
    GpuSpec,
    ModelSpec,
    Plan,
    PlanError,
    Rates,
    StagePlan,
    StageStats,
    ThroughputTable,
    TrainingPlan,
)
from lenses_data.plan.throughput import default_table_path, load_table, model_rates, parse_sets
from lenses_data.plan.training import (
    DOCUMENTED,
    PAPER_IMAGES_PER_STEP,
    PAPER_STEPS,
    documented_training,
    project_training,
    training_from_rehearsal,
)
from lenses_data.plan.usage import (
    PAPER,
    read_stage_stats,
    run_funnel,
    target_funnel,
)

__all__ = [
    "DOCUMENTED",
    "PAPER",
    "PAPER_IMAGES_PER_STEP",
    "PAPER_STEPS",
    "Assumptions",
    "Funnel",
    "GpuSpec",
    "ModelSpec",
    "Plan",
    "PlanError",
    "Rates",
    "StagePlan",
    "StageStats",
    "ThroughputTable",
    "TrainingPlan",
    "assumption_lines",
    "build_plan",
    "default_table_path",
    "documented_training",
    "load_table",
    "model_rates",
    "parse_sets",
    "plan_for_card",
    "plan_stage",
    "project_training",
    "read_stage_stats",
    "run_funnel",
    "stage_scale",
    "target_funnel",
    "training_from_rehearsal",
]
