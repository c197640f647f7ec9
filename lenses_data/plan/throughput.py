"""The throughput table (`configs/throughput-h200.yaml`, overridable with `--set`) and the per-replica
rates of a model: the table's figures where given, else the roofline's (see `lenses_data.plan`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from lenses_data.plan.schemas import Assumptions, GpuSpec, ModelSpec, PlanError, Rates, ThroughputTable


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
    """Per-replica rates: the table's figures where given, else the roofline's (see `lenses_data.plan`)."""
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


def decode_shape(
    image: float, cached: float, uncached: float, answer: float, sharing: int = 1
) -> tuple[float, float]:
    """(context, unique) KV tokens of one decoding sequence, per request averages in tokens.

    context: what attention reads per step (image + whole prompt + half the answer, on average);
    unique: what the sequence holds in the KV cache beyond blocks others hold too. The cached static
    instructions are shared by every sequence; the image and the rest of the prompt by the `sharing`
    answers of one image and kind, decoded side by side on one replica."""
    context = image + cached + uncached + answer / 2
    unique = (image + uncached) / max(1, sharing) + answer
    return max(context, 1.0), max(unique, 1.0)
