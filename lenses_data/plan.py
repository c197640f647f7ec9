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
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from lenses_data import io
from lenses_data.models.journal import read_run_journal

STAGE_ROLE = {
    "filter": "filter",
    "generate": "generator",
    "validate": "validator",
    "visual_validate": "visual_validator",
}
# Which funnel count each stage's volume follows.
STAGE_UNIT = {
    "filter": "filter_images",
    "generate": "selected_images",
    "validate": "selected_images",
    "visual_validate": "test_images",
}
# Stages whose volume grows with the candidates (answers) generated per image and kind.
PER_ANSWER = frozenset({"generate", "validate", "visual_validate"})
TEMPLATES = {
    "filter": "filter",
    "generate:prompt": "image_side_prompts",
    "generate:caption": "captions",
    "validate": "text_validation",
    "visual_validate": "visual_validation",
}
SIMULATED_PREFIX = "simulated/"
# Main paper, Table 1 and Sec. 3.1: ~10% of ~1M candidates pass the filter -> 105,669 images,
# split 99,069 / 1,100 / 5,500, with 732,405 captions.
PAPER = {"candidates": 1_000_000, "images": 105_669, "test_images": 5_500, "captions": 732_405}


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
    decode_context_tokens: float = Field(gt=0, description="KV tokens one sequence reads per decode step")
    decode_unique_tokens: float = Field(gt=0, description="KV tokens one sequence holds (prefix shared)")
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
    prefill_gpu_hours: float
    vision_gpu_hours: float
    decode_gpu_hours: float
    gpu_hours: float
    wall_clock_hours: float


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
    stages: list[StagePlan]
    total_gpu_hours: float
    wall_clock_hours: float
    assumptions: list[str]
    table: ThroughputTable


class PlanError(ValueError):
    """A run or table that a plan cannot be computed from, worded for the user."""


# ---------------------------------------------------------------------------------------------
# The throughput table


def default_table_path() -> Path:
    from lenses_data.resources import resource_dir

    return resource_dir("configs") / "throughput-h200.yaml"


def parse_sets(items: list[str]) -> dict[str, Any]:
    """`--set a.b=value` items as a nested dict (values parsed as YAML). A model id may hold dots:
    `models.Qwen/Qwen2.5-32B-Instruct.decode_tokens_per_s=6000`."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise PlanError(f"--set {item!r}: expected KEY=VALUE")
        parts = key.strip().split(".")
        if parts[0] == "models" and len(parts) > 3:
            parts = [parts[0], ".".join(parts[1:-1]), parts[-1]]
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = yaml.safe_load(raw)
    return out


def load_table(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> ThroughputTable:
    """The default table (or `path`, YAML or JSON), with `overrides` merged over it."""
    from lenses_data.config import deep_merge

    source = Path(path) if path else default_table_path()
    try:
        data = yaml.safe_load(source.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as error:
        raise PlanError(f"throughput table {source}: {error}") from None
    if path:  # a user's file only has to name what it changes
        base = yaml.safe_load(default_table_path().read_text(encoding="utf-8"))
        data = deep_merge(base, data)
    return ThroughputTable.model_validate(deep_merge(data, overrides or {}))


def model_rates(spec: ModelSpec, gpu: GpuSpec, a: Assumptions) -> Rates:
    """Per-replica rates: the table's figures where given, else the roofline's (see module doc)."""
    tp = spec.gpus_per_replica
    flops = gpu.bf16_flops * a.prefill_efficiency * tp
    derived = []
    prefill = spec.prefill_tokens_per_s
    if prefill is None:
        prefill, derived = flops / (2e9 * spec.llm_params_b), derived + ["prefill"]
    vision = spec.vision_tiles_per_s
    if vision is None and spec.vision_params_b > 0:
        vision = flops / (2e9 * spec.vision_params_b * spec.vision_patches_per_tile)
        derived.append("vision")
    # Decode: as many sequences as the KV cache holds (up to max_num_seqs); a step reads the
    # language model's weights once and every sequence's context, or is bound by its FLOPs.
    kv_memory = (
        tp * gpu.memory_gb * gpu.memory_utilization - spec.weights_gb - tp * spec.runtime_overhead_gb
    ) * 1e9
    if kv_memory <= 0:
        raise PlanError(f"weights ({spec.weights_gb} GB) leave no KV cache on {tp} x {gpu.name}")
    batch = min(spec.max_num_seqs, kv_memory / (spec.decode_unique_tokens * spec.kv_bytes_per_token))
    read = 2e9 * spec.llm_params_b + batch * spec.decode_context_tokens * spec.kv_bytes_per_token
    step = max(
        read / (tp * gpu.hbm_bytes_per_s * a.decode_efficiency), batch * 2e9 * spec.llm_params_b / flops
    )
    decode = spec.decode_tokens_per_s
    if decode is None:
        decode, derived = batch / step, derived + ["decode"]
    return Rates(
        prefill_tokens_per_s=prefill,
        decode_tokens_per_s=decode,
        vision_tiles_per_s=vision,
        decode_batch=batch,
        derived=derived,
    )


# ---------------------------------------------------------------------------------------------
# What a run measured


def _template_words(name: str) -> int:
    from lenses_data.prompts import get_template

    return len(get_template(name).text.split())


def _entry_stage(key: str) -> tuple[str, str]:
    parts = key.split(":")
    return parts[0], (parts[2] if len(parts) > 2 else "")


def read_stage_stats(run: str | Path) -> dict[str, StageStats]:
    """Per model stage: requests, failures, prompt/completion usage and the static prefix's words."""
    stats: dict[str, StageStats] = {}
    words: dict[str, int] = {}
    for entry in read_run_journal(run):
        stage, kind = _entry_stage(entry.key)
        if stage not in STAGE_ROLE:
            continue
        model = entry.model.removeprefix(SIMULATED_PREFIX)
        s = stats.setdefault(stage, StageStats(stage=stage, role=STAGE_ROLE[stage], model=model))
        template = TEMPLATES.get(f"{stage}:{kind}", TEMPLATES.get(stage))
        if template not in words:
            words[template] = _template_words(template)
        s.requests += 1
        s.failed += entry.status != "ok"
        s.simulated += bool(entry.simulated)
        s.prompt += int(entry.usage.get("prompt_tokens", 0))
        s.completion += int(entry.usage.get("completion_tokens", 0))
        s.prefix_words += words[template]
        if stage == "generate" and entry.key.count(":") >= 3:
            s.answers_per_image = max(s.answers_per_image, int(entry.key.split(":")[3]) + 1)
    return stats


def _stat(marker: dict[str, Any] | None, *names: str) -> float | None:
    values = (marker or {}).get("stats", {})
    for name in names:
        if isinstance(values.get(name), int | float):
            return float(values[name])
    return None


def run_funnel(run: str | Path, answers_per_image: int = 1) -> Funnel:
    """Candidates and the images each model stage saw, from the run's success markers."""
    ingest, dedupe = io.read_marker(run, "ingest"), io.read_marker(run, "dedupe")
    filt, split = io.read_marker(run, "filter"), io.read_marker(run, "split")
    if filt is None:
        raise PlanError(f"{run}: no finished filter stage (filter/{io.SUCCESS_MARKER}); nothing to plan from")
    filter_images = _stat(filt, "records_in", "decided") or 0.0
    candidates = _stat(ingest, "accepted") or _stat(dedupe, "images_in") or filter_images
    selected = _stat(split, "images") or _stat(filt, "records_out", "passed") or 0.0
    test = float(((split or {}).get("stats", {}).get("counts") or {}).get("test", 0))
    if not candidates:
        raise PlanError(f"{run}: the filter saw no images")
    return Funnel(
        candidates=candidates,
        filter_images=filter_images,
        selected_images=selected,
        test_images=test,
        answers_per_image=answers_per_image,
    )


def target_funnel(run_f: Funnel, candidates: float, yields: str, answers_per_image: int) -> Funnel:
    """The funnel of a build of `candidates`: the run's yields scaled, or the paper's (Table 1)."""
    if yields == "run":
        k = candidates / run_f.candidates
        return Funnel(
            candidates=candidates,
            filter_images=run_f.filter_images * k,
            selected_images=run_f.selected_images * k,
            test_images=run_f.test_images * k,
            answers_per_image=answers_per_image,
            source="run",
        )
    if yields == "paper":
        # Every candidate reaches the filter (the paper filtered before dedupe; dedupe first only
        # removes work), and the paper's shares pass it and land in test.
        selected = candidates * PAPER["images"] / PAPER["candidates"]
        return Funnel(
            candidates=candidates,
            filter_images=candidates,
            selected_images=selected,
            test_images=selected * PAPER["test_images"] / PAPER["images"],
            answers_per_image=answers_per_image,
            source="paper Table 1",
        )
    raise PlanError(f"unknown yields {yields!r}; expected run or paper")


# ---------------------------------------------------------------------------------------------
# The plan


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
    request_scale = images * (answer_ratio if s.stage == "generate" else 1.0)
    requests = s.requests * request_scale
    cached = prefix * request_scale
    uncached = (text - prefix) * images * answer_ratio
    completion *= images * answer_ratio
    image_requests = requests
    if s.stage == "generate" and a.prefix_cache and a.share_candidate_prefix:
        # Answers of one image and kind are sent back to back with the same instructions and image:
        # the prefix cache serves the image (and skips the encoder) for all but the first.
        image_requests = requests / answers
    encoded = image_requests * tiles
    prefill = uncached + encoded * a.tokens_per_tile
    decode = max(0.0, completion - requests)  # the prefill pass yields the first token
    hours = {
        "prefill": prefill / rates.prefill_tokens_per_s,
        "vision": encoded / rates.vision_tiles_per_s if encoded and rates.vision_tiles_per_s else 0.0,
        "decode": decode / rates.decode_tokens_per_s,
    }
    hours = {k: v * table.models[model].gpus_per_replica / 3600 for k, v in hours.items()}
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
        prefill_gpu_hours=hours["prefill"],
        vision_gpu_hours=hours["vision"],
        decode_gpu_hours=hours["decode"],
        gpu_hours=sum(hours.values()),
        wall_clock_hours=0.0,
    )


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
) -> Plan:
    """Project the run's model stages to `candidates` (default: the run's own) on `nodes` nodes.

    Stages run one after another (each reads the previous one's finished output), each on every GPU;
    `models` maps a role to the model that will serve it (default: the one the run journaled).
    """
    table = table or load_table()
    stats = read_stage_stats(run)
    if not stats:
        raise PlanError(f"{run}: no journal entries of a model stage in {run}/journal")
    run_f = run_funnel(run, stats["generate"].answers_per_image if "generate" in stats else 1)
    target = target_funnel(
        run_f, candidates or run_f.candidates, yields, answers_per_image or run_f.answers_per_image
    )
    gpus = nodes * gpus_per_node
    rates: dict[str, Rates] = {}
    stages = []
    for name in STAGE_ROLE:
        if name not in stats:
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
        stages=stages,
        total_gpu_hours=sum(s.gpu_hours for s in stages),
        wall_clock_hours=sum(s.wall_clock_hours for s in stages),
        assumptions=assumption_lines(table, run_f, target, stats),
        table=table,
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
        "Candidates of one image and kind share instructions + image, so the prefix cache serves the "
        "image (and skips the encoder) for all but the first."
        if a.share_candidate_prefix and a.prefix_cache
        else "Every generation request prefills and encodes its image.",
        "Prefill and decode times add up (no credit for chunked prefill overlapping them); the first "
        "answer token of a request comes from its prefill pass.",
        f"Funnel ({target.source}): {target.filter_images / target.candidates:.3f} of candidates reach the "
        f"filter, {target.selected_images / target.candidates:.4f} are selected, "
        f"{target.test_images / max(target.selected_images, 1):.4f} of those are test images; "
        f"{target.answers_per_image} answer(s) per image and kind (run: {run_f.answers_per_image}). "
        "Generation and validation volume scale with selected images x answers.",
        f"Stages run one after another on all GPUs, plus {a.stage_overhead_minutes:g} min each "
        "(server start, weight load, last shard's tail). Ingest and dedupe run on CPU and are not priced.",
        "Per-request token counts are the run's averages: "
        + ", ".join(f"{s.stage} {s.requests} requests ({s.failed} failed)" for s in stats.values())
        + ".",
    ]
    return lines


def plan_for_card(run: str | Path, config: Any, **kwargs: Any) -> dict[str, Any]:
    """The plan of this run's build as JSON for the dataset card: the run's candidates and yields,
    the config's answers per image and models (keyword arguments of `build_plan` override)."""
    models = {role: config.models.role(role).model for role in STAGE_ROLE.values()}
    options = {"answers_per_image": config.annotate.candidates_per_image, "models": models, **kwargs}
    return build_plan(run, **options).model_dump(mode="json")
