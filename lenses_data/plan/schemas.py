"""The plan's models: the throughput table (GPU, models, assumptions), a run's measured usage and
funnel, and the plan itself (stored as JSON in the dataset card's manifest)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class PlanError(ValueError):
    """A run or table that a plan cannot be computed from, worded for the user."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GpuSpec(_Model):
    name: str = "H200"
    bf16_flops: float = Field(7.9e14, gt=0)
    hbm_bytes_per_s: float = Field(4.8e12, gt=0)
    memory_gb: float = Field(141, gt=0)
    memory_utilization: float = Field(0.9, gt=0, le=1)


class ModelSpec(_Model):
    llm_params_b: float = Field(gt=0)
    vision_params_b: float = Field(0, ge=0)
    vision_patches_per_tile: int = Field(1025, ge=1)
    weights_gb: float = Field(gt=0)
    kv_bytes_per_token: float = Field(262144, gt=0)
    runtime_overhead_gb: float = Field(4, ge=0)
    max_num_seqs: int = Field(256, ge=1)
    gpus_per_replica: int = Field(1, ge=1)
    decode_context_tokens: float = Field(
        gt=0, description="KV tokens one sequence reads per decode step (the model's reference rate)"
    )
    decode_unique_tokens: float = Field(
        gt=0, description="KV tokens one sequence holds, prefix shared (the model's reference rate)"
    )
    prefill_tokens_per_s: float | None = Field(None, gt=0)
    decode_tokens_per_s: float | None = Field(None, gt=0)
    vision_tiles_per_s: float | None = Field(None, gt=0)


class Assumptions(_Model):
    tokens_per_tile: int = Field(256, ge=1)
    tiles: dict[str, int] = Field(
        default_factory=lambda: {"filter": 1, "generator": 7, "visual_validator": 7, "validator": 0}
    )
    run_tiles: dict[str, int] | None = None
    prompt_tokens_per_word: float = Field(1.3, gt=0)
    completion_tokens_per_word: float = Field(1.6, gt=0)
    prefix_cache: bool = True
    share_candidate_prefix: bool = True
    # Each stage's decode rate from its own measured sequence: context = image + prompt + half the
    # answer; KV held = what the prefix cache does not share. False: the model's reference figures.
    decode_from_run: bool = True
    prefill_efficiency: float = Field(0.7, gt=0, le=1)
    decode_efficiency: float = Field(0.8, gt=0, le=1)
    stage_overhead_minutes: float = Field(10, ge=0)


class ThroughputTable(_Model):
    gpu: GpuSpec = Field(default_factory=GpuSpec)
    models: dict[str, ModelSpec]
    assumptions: Assumptions = Field(default_factory=Assumptions)


class Rates(_Model):
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    vision_tiles_per_s: float | None
    decode_batch: float
    derived: list[str] = Field(description="Rates taken from the roofline rather than the table")


class StageStats(_Model):
    """What one stage's journal entries add up to (simulated entries count words, not tokens)."""

    stage: str
    role: str
    model: str
    requests: int = 0
    failed: int = 0
    simulated: int = 0
    prompt: float = 0
    prefix_words: float = 0
    completion: float = 0
    answers_per_image: int = 1
    cached: float = Field(0, description="Prompt tokens the server's prefix cache served (where reported)")
    cached_reported: int = Field(
        0, description="Requests whose usage reported cached tokens (vLLM reports a hit, leaves out a miss)"
    )


class Funnel(_Model):
    candidates: float = Field(gt=0)
    filter_images: float = Field(ge=0)
    selected_images: float = Field(ge=0)
    test_images: float = Field(ge=0)
    answers_per_image: int = Field(1, ge=1, description="annotate.candidates_per_image")
    source: str = "run"


class StagePlan(_Model):
    stage: str
    model: str
    requests: float
    tiles_per_request: int
    prompt_text_tokens: float
    cached_prefix_tokens: float
    prefill_tokens: float
    encoded_tiles: float
    decode_tokens: float
    decode_context_tokens: float = Field(0, description="KV tokens a sequence reads per decode step")
    decode_unique_tokens: float = Field(0, description="KV tokens a sequence holds (shared prefix out)")
    decode_batch: float = Field(0, description="Sequences decoded at once per replica")
    decode_tokens_per_s: float = Field(0, description="Decode rate per replica used for this stage")
    prefill_gpu_hours: float
    vision_gpu_hours: float
    decode_gpu_hours: float
    gpu_hours: float
    wall_clock_hours: float


class TrainingPlan(_Model):
    """Training's wall time and GPU-hours for a recipe (lenses_data.plan.training)."""

    source: str = Field(description="Where the seconds per micro-batch come from, in words")
    card: str
    seconds_per_micro_batch: float = Field(gt=0)
    images_per_micro_batch: int = Field(ge=1)
    peak_allocated_gib: float | None = None
    peak_reserved_gib: float | None = None
    steps: int = Field(ge=1)
    images_per_step: int = Field(ge=1)
    gpus: int = Field(ge=1)
    accumulation: float = Field(description="Micro-batches per GPU per optimizer step")
    wall_clock_hours: float
    gpu_hours: float


class Plan(_Model):
    run: str
    simulated_run: bool
    candidates: float
    yields: str
    gpu: str
    nodes: int
    gpus_per_node: int
    run_funnel: Funnel
    target_funnel: Funnel
    rates: dict[str, Rates]
    run_stats: dict[str, StageStats] = Field(default_factory=dict, description="What the run measured")
    stages: list[StagePlan]
    total_gpu_hours: float
    wall_clock_hours: float
    assumptions: list[str]
    table: ThroughputTable
    training: TrainingPlan | None = Field(
        None, description="Training's GPU-hours (lenses_data.plan.training), when the plan was asked for them"
    )
