"""Checkpoints: RUN/checkpoints/step-XXXXXXX/ with

- trainable.safetensors  every trainable tensor by name: LoRA adapters, the six new-token rows
                         (peft trainable tokens) and the projector (peft modules_to_save copy)
- optimizer.pt           AdamW state (param order is deterministic from the model build)
- state.json             step, the full TrainConfig, base model path
and RUN/processor/ (tokenizer with the new tokens + image processor) for encoding. A step
directory is written under a temporary name and renamed when complete, so a crash never leaves a
half checkpoint that resume would pick up.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from torch import nn

STATE = "state.json"
WEIGHTS = "trainable.safetensors"
OPTIM = "optimizer.pt"


def step_dir(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step-{step:07d}"


def trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().cpu().contiguous() for n, p in model.named_parameters() if p.requires_grad}


def save_checkpoint(
    run_dir: str | Path,
    step: int,
    model: nn.Module,
    optimizer,
    config: dict,
    base_path: str,
    keep_last: int = 2,
) -> Path:
    from safetensors.torch import save_file

    final = step_dir(run_dir, step)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(trainable_state(model), str(tmp / WEIGHTS))
    if optimizer is not None:
        torch.save(optimizer.state_dict(), tmp / OPTIM)
    (tmp / STATE).write_text(
        json.dumps({"step": step, "config": config, "base_path": str(base_path)}, indent=2)
    )
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    _prune(Path(run_dir) / "checkpoints", keep_last)
    return final


def _prune(root: Path, keep_last: int) -> None:
    done = sorted(p for p in root.glob("step-*") if p.is_dir() and not p.name.endswith(".tmp"))
    for old in done[:-keep_last] if keep_last > 0 else []:
        shutil.rmtree(old, ignore_errors=True)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    root = Path(run_dir) / "checkpoints"
    done = sorted(p for p in root.glob("step-*") if (p / STATE).exists() and not p.name.endswith(".tmp"))
    return done[-1] if done else None


def read_state(ckpt: str | Path) -> dict:
    return json.loads((Path(ckpt) / STATE).read_text())


def load_weights(ckpt: str | Path, model: nn.Module) -> None:
    """Load trainable tensors; every saved name must exist and every trainable param must be saved."""
    from safetensors.torch import load_file

    saved = load_file(str(Path(ckpt) / WEIGHTS))
    params = dict(model.named_parameters())
    unknown = sorted(set(saved) - set(params))
    missing = sorted(n for n, p in params.items() if p.requires_grad and n not in saved)
    if unknown or missing:
        raise ValueError(
            f"checkpoint {ckpt} does not fit the model: unknown={unknown[:5]} missing={missing[:5]}"
        )
    with torch.no_grad():
        for name, tensor in saved.items():
            params[name].copy_(tensor.to(params[name].device, params[name].dtype))


def load_checkpoint(ckpt: str | Path, model: nn.Module, optimizer=None) -> int:
    """Restore weights (and optimizer state when given); returns the step to continue from."""
    load_weights(ckpt, model)
    if optimizer is not None and (Path(ckpt) / OPTIM).exists():
        optimizer.load_state_dict(torch.load(Path(ckpt) / OPTIM, map_location="cpu", weights_only=True))
    return int(read_state(ckpt)["step"])
