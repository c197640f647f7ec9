"""AdamW over trainable parameters only, and the learning-rate schedule as a pure function."""

from __future__ import annotations

import math

import torch
from torch import nn

from training.retriever.config import OptimConfig


def lr_at(step: int, cfg: OptimConfig) -> float:
    """Linear warmup to cfg.lr over warmup_steps, then cosine from cfg.lr down to cfg.min_lr at max_steps."""
    if cfg.warmup_steps > 0 and step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(cfg.max_steps - cfg.warmup_steps, 1)
    progress = min(max(step - cfg.warmup_steps, 0) / span, 1.0)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1.0 + math.cos(math.pi * progress))


def _no_decay(name: str, param: nn.Parameter) -> bool:
    # biases, norms and token embeddings are not decayed; LoRA and projector matrices are
    return param.ndim < 2 or "trainable_tokens" in name or "embed" in name or "norm" in name


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two AdamW groups built from parameters with requires_grad only (frozen weights get no state)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (no_decay if _no_decay(name, param) else decay).append(param)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return [g for g in groups if g["params"]]


def build_optimizer(model: nn.Module, cfg: OptimConfig) -> torch.optim.AdamW:
    groups = param_groups(model, cfg.weight_decay)
    if not groups:
        raise ValueError("model has no trainable parameters")
    fused = all(p.is_cuda for g in groups for p in g["params"])
    return torch.optim.AdamW(groups, lr=lr_at(0, cfg), betas=cfg.betas, fused=fused or None)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
