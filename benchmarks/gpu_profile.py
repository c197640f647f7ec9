"""One training step under torch.profiler, for benchmarks/gpu_check.py: the top operators by device
time (CPU time on the CPU) and the shares of the step spent in attention, matmuls, activation
checkpointing's recompute, the optimizer and the wait for data.

The step is the rehearsal's (training.loop.rehearse): the configured retriever on random weights,
synthetic micro-batches of the real shapes, forward + backward + grad clip + AdamW. Its phases run
inside named `record_function` ranges (lenses::data, lenses::forward, lenses::backward,
lenses::optimizer); the recompute is tagged through torch.utils.checkpoint's `context_fn`, set on
every checkpointed layer, so its kernels fall inside lenses::recompute (within the backward).
"data wait" is the collation and host-to-device copy of one micro-batch done in the step's own
process: an upper bound of what a DataLoader with workers leaves the step waiting for.
"""

from __future__ import annotations

import contextlib
import functools
import time

import torch

PHASES = ("lenses::data", "lenses::forward", "lenses::backward", "lenses::recompute", "lenses::optimizer")
ATTENTION = ("attention", "sdpa", "softmax")  # sdpa kernels (flash, memory-efficient, math), eager softmax
MATMUL = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm")


def tag_recompute(retriever) -> int:
    """Run every checkpointed layer's recompute inside record_function("lenses::recompute")."""
    from torch.utils.checkpoint import checkpoint

    def contexts():
        return contextlib.nullcontext(), torch.profiler.record_function("lenses::recompute")

    tagged = 0
    for module in retriever.modules():
        if getattr(module, "gradient_checkpointing", False) and hasattr(
            module, "_gradient_checkpointing_func"
        ):
            module._gradient_checkpointing_func = functools.partial(
                checkpoint, use_reentrant=False, context_fn=contexts
            )
            tagged += 1
    return tagged


def _self_time(event, cuda: bool) -> float:
    if cuda:
        return getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0.0)
    return event.self_cpu_time_total


def _total_time(event, cuda: bool) -> float:
    if cuda:
        return getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0.0)
    return event.cpu_time_total


def summarize(events, cuda: bool, wall_s: float, top: int = 15) -> dict:
    """Top operators by self time and the shares of the named phases and operator classes.

    Only host-side events count: an operator's self device time is that of the kernels it launched,
    and the kernels' own entries (and the GPU-side copies of the phase ranges) would count it twice."""
    from torch.autograd import DeviceType

    events = [e for e in events if getattr(e, "device_type", DeviceType.CPU) == DeviceType.CPU]
    ops = [e for e in events if not e.key.startswith("lenses::") and _self_time(e, cuda) > 0]
    busy = sum(_self_time(e, cuda) for e in ops)  # microseconds
    ranked = sorted(ops, key=lambda e: _self_time(e, cuda), reverse=True)[:top]
    phase = {e.key: _total_time(e, cuda) for e in events if e.key in PHASES}
    data_cpu = next((e.cpu_time_total for e in events if e.key == "lenses::data"), 0.0)

    def share(names) -> float:
        return sum(_self_time(e, cuda) for e in ops if any(n in e.key.lower() for n in names)) / max(busy, 1)

    return {
        "clock": "device (CUDA kernels)" if cuda else "CPU",
        "step_wall_s": wall_s,
        "busy_s": busy / 1e6,
        "top_operators": [
            {
                "name": e.key,
                "self_ms": _self_time(e, cuda) / 1e3,
                "share": _self_time(e, cuda) / max(busy, 1),
                "calls": e.count,
            }
            for e in ranked
        ],  # fmt: skip
        "shares_of_busy_time": {
            "attention": share(ATTENTION),
            "matmul": share(tuple(m.lower() for m in MATMUL)),
            "recompute": phase.get("lenses::recompute", 0.0) / max(busy, 1),
            "optimizer": phase.get("lenses::optimizer", 0.0) / max(busy, 1),
        },
        "data_wait_share_of_wall": data_cpu / 1e6 / max(wall_s, 1e-9),
        "phase_s": {k: v / 1e6 for k, v in phase.items()},
    }


def profile_step(cfg, base, device: torch.device, shape, top: int = 15) -> dict:
    """Build as the rehearsal does, warm up one step, then profile one micro-batch and its optimizer step."""
    from training.loop.inputs import to_device
    from training.loop.optim import build_optimizer
    from training.loop.rehearsal_batches import synthetic_batches
    from training.loop.rehearse import build_for_rehearsal, checkpointing_of

    retriever, processor, _ = build_for_rehearsal(cfg, base, device, checkpointing_of(cfg, device), True)
    retriever.train()
    tagged = tag_recompute(retriever)
    optimizer = build_optimizer(retriever, cfg.optim)
    lens = cfg.loss.mode == "lens"

    def step(seed: int) -> None:
        with torch.profiler.record_function("lenses::data"):
            (batch,) = synthetic_batches(processor, cfg.data, lens, shape, 1, seed)
            batch = to_device(batch, device)
        with torch.profiler.record_function("lenses::forward"):
            loss = retriever(batch)["total"]
        with torch.profiler.record_function("lenses::backward"):
            loss.backward()
        with torch.profiler.record_function("lenses::optimizer"):
            torch.nn.utils.clip_grad_norm_(retriever.parameters(), cfg.optim.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    step(cfg.run.seed)  # warm-up: kernels chosen, optimizer state allocated
    cuda = device.type == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU] + (
        [torch.profiler.ProfilerActivity.CUDA] if cuda else []
    )
    if cuda:
        torch.cuda.synchronize(device)
    with torch.profiler.profile(activities=activities) as prof:
        start = time.perf_counter()
        step(cfg.run.seed + 1)
        if cuda:
            torch.cuda.synchronize(device)
        wall = time.perf_counter() - start
    return {**summarize(prof.key_averages(), cuda, wall, top), "checkpointed_layers_tagged": tagged}
