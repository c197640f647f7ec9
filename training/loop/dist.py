"""torch.distributed helpers for torchrun: setup, and gathering contrastive negatives across ranks.

Every rank gathers all ranks' embeddings and computes the *full* global-batch loss. The local
shard is swapped back into the gathered tensors so gradients flow into this rank's encoder;
remote shards are constants here and get their gradients on their own ranks. Because DDP
averages gradients over ranks, the loop multiplies the loss by the world size before backward,
which makes the summed gradient equal to the gradient of the single global-batch loss.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world > 1


def init_distributed(device_type: str) -> DistContext:
    """Join the torchrun process group when WORLD_SIZE > 1 (NCCL on GPU, gloo on CPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext()
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_type == "cuda" else "gloo")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device_type == "cuda":
        torch.cuda.set_device(local_rank)
    return DistContext(rank=dist.get_rank(), world=dist.get_world_size(), local_rank=local_rank)


def barrier(ctx: DistContext) -> None:
    if ctx.enabled:
        dist.barrier()


def _pad_to(x: torch.Tensor, sizes: list[int], value: float | int) -> torch.Tensor:
    pads = []
    for dim in reversed(range(x.dim())):
        pads += [0, sizes[dim] - x.shape[dim]]
    return torch.nn.functional.pad(x, pads, value=value) if any(pads) else x


def all_gather_with_grad(x: torch.Tensor, pad_value: float | int = 0) -> torch.Tensor:
    """Concatenate x from all ranks along dim 0; x may differ in every dim's length.

    Other dims are padded to the global max with `pad_value` (use -1 for slot lens so padded slots
    are inactive); dim 0 is trimmed back to each rank's true length.
    """
    world = dist.get_world_size()
    rank = dist.get_rank()
    shape = torch.tensor(list(x.shape), device=x.device)
    shapes = [torch.zeros_like(shape) for _ in range(world)]
    dist.all_gather(shapes, shape)
    max_sizes = torch.stack(shapes).amax(dim=0).tolist()
    padded = _pad_to(x.detach(), max_sizes, pad_value).contiguous()
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    parts = [p[: int(s[0])] for p, s in zip(parts, shapes, strict=True)]
    parts[rank] = _pad_to(x, [x.shape[0], *max_sizes[1:]], pad_value)  # local shard keeps its graph
    return torch.cat(parts, dim=0)


def make_gather(ctx: DistContext):
    """The `gather` callable for LensRetriever: identity on one process."""
    if not ctx.enabled:
        return lambda tensors: tensors

    def gather(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: all_gather_with_grad(v, -1 if k.endswith("_lens") else 0) for k, v in tensors.items()}

    return gather


def reduce_mean(value: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    """Mean of a scalar over ranks (for logging only)."""
    if not ctx.enabled:
        return value
    value = value.detach().clone()
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value / ctx.world


def shutdown() -> None:
    """Leave the process group (end of a torchrun job); no-op on one process."""
    if dist.is_initialized():
        dist.destroy_process_group()
