"""Peak memory of the rehearsal, and the check that a micro-batch fits.

CUDA: the allocator's own peaks (torch.cuda.max_memory_allocated / max_memory_reserved); an
out-of-memory error means the batch does not fit. A `budget_gib` is applied as a real allocator
cap (torch.cuda.set_per_process_memory_fraction, lifted again on exit), so the same OOM path runs.

CPU has no allocator statistics. The tracker estimates from tensor sizes: parameters and
buffers, gradients, optimizer state, and the activations autograd saves for backward (counted by
torch.autograd.graph.saved_tensors_hooks during the forward, each storage once), and the process
peak RSS is reported beside it, labelled as such. A `budget_gib` on the CPU compares that estimate
after each forward (the activations' peak) and raises DoesNotFit when it is over: this is how the
tests drive the refusal path honestly without a GPU.
"""

from __future__ import annotations

import contextlib
import resource

import torch

GIB = 1024**3


class DoesNotFit(RuntimeError):
    """The micro-batch does not fit the injected CPU budget."""


# What "does not fit" looks like, wherever in the step (forward, backward, optimizer) it happens.
NOT_FITTING = (DoesNotFit, torch.cuda.OutOfMemoryError)


def not_fitting_reason(error: BaseException) -> str:
    if isinstance(error, torch.cuda.OutOfMemoryError):
        return f"CUDA out of memory: {str(error).splitlines()[0]}"
    return str(error)


def _bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class MemoryTracker:
    """Entered before the model is built (the CUDA cap then covers the weights too); `attach` the
    model and optimizer once they exist."""

    def __init__(self, device: torch.device, budget_gib: float | None):
        self.device, self.model, self.optimizer = device, None, None
        self.budget = budget_gib * GIB if budget_gib else None
        self.saved = 0  # bytes of activations saved in the current forward
        self.estimate_peak = 0

    def attach(self, model: torch.nn.Module, optimizer) -> None:
        """The built model: on the CPU its weights, gradients and state alone are checked against
        the budget (on CUDA an allocation over the cap has already failed while building)."""
        self.model, self.optimizer = model, optimizer
        if self.device.type != "cuda" and self.budget and self.static_bytes() > self.budget:
            raise DoesNotFit(
                f"the model alone, {self.static_bytes() / GIB:.3g} GiB of weights and fp32 gradients, is over "
                f"the {self.budget / GIB:.3g} GiB --memory-budget-gib cap before any batch"
            )

    # ---- context: the CUDA cap is lifted whatever happens ------------------------------------
    def __enter__(self) -> MemoryTracker:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            if self.budget:
                total = torch.cuda.get_device_properties(self.device).total_memory
                torch.cuda.set_per_process_memory_fraction(min(1.0, self.budget / total), self.device)
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda" and self.budget:
            torch.cuda.set_per_process_memory_fraction(1.0, self.device)

    def reset(self) -> None:
        self.saved, self.estimate_peak = 0, 0
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    @contextlib.contextmanager
    def forward(self):
        """Around a forward: on CPU, the activations saved for backward are counted."""
        if self.device.type == "cuda":
            yield
            return
        seen: set[int] = set()
        self.saved = 0

        def pack(t: torch.Tensor) -> torch.Tensor:
            key = t.untyped_storage().data_ptr()
            if key not in seen:
                seen.add(key)
                self.saved += t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield

    def check(self) -> None:
        """After a forward, the activations' peak: over the CPU budget -> DoesNotFit."""
        if self.device.type == "cuda":
            return
        estimate = self.static_bytes() + self.saved
        self.estimate_peak = max(self.estimate_peak, estimate)
        if self.budget and estimate > self.budget:
            raise DoesNotFit(
                f"estimated {estimate / GIB:.3g} GiB of tensors over the {self.budget / GIB:.3g} GiB "
                "--memory-budget-gib cap (CPU: weights, grads, optimizer state, saved activations)"
            )

    def static_bytes(self) -> int:
        """Weights and buffers, fp32 gradients of the trainable weights, optimizer state."""
        params = sum(_bytes(p) for p in self.model.parameters())
        grads = sum(p.numel() * 4 for p in self.model.parameters() if p.requires_grad)
        buffers = sum(_bytes(b) for b in self.model.buffers())
        state = sum(
            _bytes(v) for s in self.optimizer.state.values() for v in s.values() if torch.is_tensor(v)
        )
        return params + grads + buffers + state

    def report(self) -> dict:
        if self.device.type == "cuda":
            return {
                "kind": "cuda",
                "peak_allocated_bytes": torch.cuda.max_memory_allocated(self.device),
                "peak_reserved_bytes": torch.cuda.max_memory_reserved(self.device),
                "device_total_bytes": torch.cuda.get_device_properties(self.device).total_memory,
            }
        return {
            "kind": "cpu",
            "peak_allocated_bytes": None,
            "peak_reserved_bytes": None,
            "estimated_bytes": self.estimate_peak,
            "saved_activation_bytes": self.saved,
            # ru_maxrss is KiB on Linux; the whole process's peak, earlier work included
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "note": "CPU: no allocator statistics; estimate from tensor sizes, RSS of the whole process",
        }
