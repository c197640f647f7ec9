"""The plan: each model stage's measured volume scaled to the target funnel and priced in GPU-hours
(formula in `lenses_data.plan`), plus the assumptions it rests on, in words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lenses_data.config.pipeline import BUILTIN_STAGES, GENERATE
from lenses_data.config.roles import ROLE_OF_STAGE, ROLES
from lenses_data.plan.schemas import (
    Assumptions,
    Funnel,
    ModelSpec,
    Plan,
    PlanError,
    Rates,
    StagePlan,
    StageStats,
    ThroughputTable,
    TrainingPlan,
)
from lenses_data.plan.throughput import decode_shape, load_table, model_rates
from lenses_data.plan.usage import read_stage_stats, run_funnel, target_funnel

# Which funnel count each model stage's volume follows (declared with the stage; a model stage
# declared without one is not priced, and the plan says so).
STAGE_UNIT = {spec.name: spec.plan_unit for spec in BUILTIN_STAGES if spec.role and spec.plan_unit}
# Stages whose volume grows with the candidates (answers) generated per image and kind.
PER_ANSWER = frozenset(spec.name for spec in BUILTIN_STAGES if spec.per_answer)


def stage_scale(stage: str, run_f: Funnel, target_f: Funnel) -> tuple[float, float]:
    """(images, answers): how many times the run's images of `stage` the target has, and how many
    times its answers per image and kind (generation and validation volume follow both)."""
    unit = STAGE_UNIT[stage]
    have = getattr(run_f, unit)
    images = getattr(target_f, unit) / have if have else 0.0
    answers = target_f.answers_per_image / run_f.answers_per_image if stage in PER_ANSWER else 1.0
    return images, answers


def _run_tokens(s: StageStats, a: Assumptions) -> tuple[float, float, float]:
    """The run's (prompt text, cached prefix, completion) tokens of a stage."""
    if s.simulated * 2 >= s.requests:  # simulated usage counts words and no image
        text = s.prompt * a.prompt_tokens_per_word
        # A choice (the filter's YES/NO) is one token; JSON answers carry quotes, braces and keys.
        completion = s.completion * (1.0 if s.role == "filter" else a.completion_tokens_per_word)
    else:  # a model server counts the image's tokens in prompt_tokens
        run_tiles = {**a.tiles, **(a.run_tiles or {})}.get(s.role, 0)
        text = max(0.0, s.prompt - s.requests * run_tiles * a.tokens_per_tile)
        completion = s.completion
    prefix = min(text, s.prefix_words * a.prompt_tokens_per_word) if a.prefix_cache else 0.0
    return text, prefix, completion


def plan_stage(
    s: StageStats,
    scale: tuple[float, float],
    model: str,
    table: ThroughputTable,
    rates: Rates,
    answers: int = 1,
) -> StagePlan:
    """One stage's tokens and GPU-hours at `scale` (see `stage_scale`), `answers` per image and kind."""
    a = table.assumptions
    images, answer_ratio = scale
    tiles = a.tiles.get(s.role, 0)
    text, prefix, completion = _run_tokens(s, a)
    # Generation sends one request per answer; validation one per image and kind (a batch holds the
    # items of every answer), so its request count follows images only.
    request_scale = images * (answer_ratio if s.stage == GENERATE else 1.0)
    requests = s.requests * request_scale
    cached = prefix * request_scale
    uncached = (text - prefix) * images * answer_ratio
    completion *= images * answer_ratio
    image_requests = requests
    shared = s.stage == GENERATE and a.prefix_cache and a.share_candidate_prefix
    if shared:
        # Answers of one image and kind go to one replica (the client's image affinity) with the
        # same instructions and image: the prefix cache serves the image, and skips its encoder,
        # for all but the first.
        image_requests = requests / answers
    encoded = image_requests * tiles
    prefill = uncached + encoded * a.tokens_per_tile
    decode = max(0.0, completion - requests)  # the prefill pass yields the first token
    spec = table.models[model]
    if a.decode_from_run and requests:
        context, unique = decode_shape(
            image=tiles * a.tokens_per_tile,
            cached=cached / requests,
            uncached=uncached / requests,
            answer=completion / requests,
            sharing=answers if shared else 1,
        )
        spec = spec.model_copy(update={"decode_context_tokens": context, "decode_unique_tokens": unique})
        rates = rates.model_copy(update=_decode_rates(spec, table))
    hours = {
        "prefill": prefill / rates.prefill_tokens_per_s,
        "vision": encoded / rates.vision_tiles_per_s if encoded and rates.vision_tiles_per_s else 0.0,
        "decode": decode / rates.decode_tokens_per_s,
    }
    hours = {k: v * spec.gpus_per_replica / 3600 for k, v in hours.items()}
    return StagePlan(
        stage=s.stage,
        model=model,
        requests=requests,
        tiles_per_request=tiles,
        prompt_text_tokens=uncached + cached,
        cached_prefix_tokens=cached,
        prefill_tokens=prefill,
        encoded_tiles=encoded,
        decode_tokens=decode,
        decode_context_tokens=spec.decode_context_tokens,
        decode_unique_tokens=spec.decode_unique_tokens,
        decode_batch=rates.decode_batch,
        decode_tokens_per_s=rates.decode_tokens_per_s,
        prefill_gpu_hours=hours["prefill"],
        vision_gpu_hours=hours["vision"],
        decode_gpu_hours=hours["decode"],
        gpu_hours=sum(hours.values()),
        wall_clock_hours=0.0,
    )


def _decode_rates(spec: ModelSpec, table: ThroughputTable) -> dict[str, float]:
    """The decode rate and batch of `spec`'s sequence shape (a table's explicit rate still wins)."""
    derived = model_rates(spec, table.gpu, table.assumptions)
    return {"decode_tokens_per_s": derived.decode_tokens_per_s, "decode_batch": derived.decode_batch}


def _wall_clock(stage: StagePlan, spec: ModelSpec, gpus: int, overhead_h: float) -> float:
    replicas = gpus // spec.gpus_per_replica
    if replicas < 1:
        raise PlanError(f"{gpus} GPUs cannot hold one {spec.gpus_per_replica}-GPU replica of {stage.model}")
    return stage.gpu_hours / spec.gpus_per_replica / replicas + overhead_h


def build_plan(
    run: str | Path,
    *,
    candidates: float | None = None,
    yields: str = "run",
    nodes: int = 4,
    gpus_per_node: int = 8,
    table: ThroughputTable | None = None,
    answers_per_image: int | None = None,
    models: dict[str, str] | None = None,
    stats: dict[str, StageStats] | None = None,
    training: TrainingPlan | None = None,
) -> Plan:
    """Project the run's model stages to `candidates` (default: the run's own) on `nodes` nodes.

    Stages run one after another (each reads the previous one's finished output), each on every GPU;
    `models` maps a role to the model that will serve it (default: the one the run journaled);
    `stats` are the run's `read_stage_stats`, when the caller has read them already; `training`
    (lenses_data.plan.training) is carried beside the build's stages, not added to their total.
    """
    table = table or load_table()
    stats = read_stage_stats(run) if stats is None else stats
    if not stats:
        raise PlanError(f"{run}: no journal entries of a model stage in {run}/journal")
    run_f = run_funnel(run, stats[GENERATE].answers_per_image if GENERATE in stats else 1)
    target = target_funnel(
        run_f, candidates or run_f.candidates, yields, answers_per_image or run_f.answers_per_image
    )
    gpus = nodes * gpus_per_node
    rates: dict[str, Rates] = {}
    stages = []
    for name in ROLE_OF_STAGE:  # the model stages, in pipeline order
        if name not in stats or name not in STAGE_UNIT:  # not run, or declared without a plan unit
            continue
        model = (models or {}).get(stats[name].role) or stats[name].model
        if model not in table.models:
            raise PlanError(f"no throughput figures for {model!r}; the table has {', '.join(table.models)}")
        spec = table.models[model]
        rates.setdefault(model, model_rates(spec, table.gpu, table.assumptions))
        scale = stage_scale(name, run_f, target)
        stage = plan_stage(stats[name], scale, model, table, rates[model], target.answers_per_image)
        overhead = table.assumptions.stage_overhead_minutes / 60
        stages.append(stage.model_copy(update={"wall_clock_hours": _wall_clock(stage, spec, gpus, overhead)}))
    return Plan(
        run=str(run),
        simulated_run=all(s.simulated * 2 >= s.requests for s in stats.values()),
        candidates=target.candidates,
        yields=yields,
        gpu=table.gpu.name,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        run_funnel=run_f,
        target_funnel=target,
        rates=rates,
        run_stats=stats,
        stages=stages,
        total_gpu_hours=sum(s.gpu_hours for s in stages),
        wall_clock_hours=sum(s.wall_clock_hours for s in stages),
        assumptions=assumption_lines(table, run_f, target, stats),
        table=table,
        training=training,
    )


def assumption_lines(table: ThroughputTable, run_f: Funnel, target: Funnel, stats: dict) -> list[str]:
    """Every assumption the numbers rest on, in words (printed and stored with the plan)."""
    a, g = table.assumptions, table.gpu
    lines = [
        f"{g.name}: {g.bf16_flops / 1e12:.0f} TFLOP/s bf16, {g.hbm_bytes_per_s / 1e12:.1f} TB/s, "
        f"{g.memory_gb:.0f} GB ({g.memory_utilization:.0%} given to vLLM).",
        f"Rates not set in the table come from the roofline: prefill and the vision encoder at "
        f"{a.prefill_efficiency:.0%} of the FLOP/s (2 FLOP per parameter per token; attention's ~3% at "
        f"these lengths left out), decode at {a.decode_efficiency:.0%} of HBM bandwidth with as many "
        "sequences as the KV cache holds (each step reads the weights and every sequence's context).",
        f"Image tokens: {a.tokens_per_tile} per 448 px tile; tiles per request by role: "
        + ", ".join(f"{r} {n}" for r, n in a.tiles.items())
        + ". Simulated usage has no image tokens.",
        f"Simulated usage counts words: prompts x {a.prompt_tokens_per_word}, JSON answers x "
        f"{a.completion_tokens_per_word} tokens a word. Answer lengths are the simulator's.",
        "Prefix cache: "
        + (
            "the static instructions before the image are prefilled once, not per request."
            if a.prefix_cache
            else "off; every prompt token is prefilled."
        ),
        "Candidates of one image and kind share instructions + image and go to one replica (the "
        "client's image affinity), so the prefix cache serves the image (and skips the encoder) for "
        "all but the first."
        if a.share_candidate_prefix and a.prefix_cache
        else "Every generation request prefills and encodes its image.",
        "Prefill and decode times add up (no credit for chunked prefill overlapping them); the first "
        "answer token of a request comes from its prefill pass.",
        "Decode, per stage: "
        + (
            "each sequence reads its image, prompt and half its answer per step and holds in the KV "
            "cache what the prefix cache does not share (the static instructions are shared by all; "
            "the image and prompt of one image and kind by its answers, which run side by side)."
            if a.decode_from_run
            else "the model's reference sequence of the table (decode_context_tokens, decode_unique_tokens)."
        ),
        f"Funnel ({target.source}): {target.filter_images / target.candidates:.3f} of candidates reach the "
        f"filter, {target.selected_images / target.candidates:.4f} are selected, "
        f"{target.test_images / max(target.selected_images, 1):.4f} of those are test images; "
        f"{target.answers_per_image} answer(s) per image and kind (run: {run_f.answers_per_image}). "
        "Generation and validation volume scale with selected images x answers.",
        f"Stages run one after another on all GPUs, plus {a.stage_overhead_minutes:g} min each "
        "(server start, weight load, last shard's tail). Ingest and dedupe run on CPU and are not priced.",
        *[
            f"{name}: a model stage declared without a plan unit (`StageSpec.plan_unit`), not priced."
            for name in stats
            if name not in STAGE_UNIT
        ],
        "Per-request token counts are the run's averages: "
        + ", ".join(f"{s.stage} {s.requests} requests ({s.failed} failed)" for s in stats.values())
        + ".",
    ]
    return lines


def plan_for_card(run: str | Path, config: Any, **kwargs: Any) -> dict[str, Any]:
    """The plan of this run's build as JSON for the dataset card: the run's candidates and yields,
    the config's answers per image and models (keyword arguments of `build_plan` override)."""
    models = {role: config.models.role(role).model for role in ROLES}
    options = {"answers_per_image": config.annotate.candidates_per_image, "models": models, **kwargs}
    return build_plan(run, **options).model_dump(mode="json")
