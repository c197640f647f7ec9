"""Training-step speed levers (issue 31), each switched by a `speed.*` field of the TrainConfig.

Every lever keeps the recipe: the same model, data, batch and loss. The tests in
tests/training/retriever/test_speed.py compare loss and trainable gradients with each lever on
and off on the tiny model; benchmarks/bench_train_levers.py measures time and peak memory.

- `vision_no_grad`: with activation checkpointing on, peft calls transformers'
  `enable_input_require_grads`, which hooks the input embeddings of *every* sub-model, the CLIP
  tower's patch embedding included. The frozen tower then builds an autograd graph, keeps its
  checkpointed layer inputs, recomputes itself in backward and backpropagates to the pixels for
  nothing: no parameter in it trains. Running it under `torch.no_grad` removes all of that.
- `lora_no_input_cast`: peft casts each LoRA input to the adapter's fp32 dtype; under bf16
  autocast the adapter's matmul casts it straight back to bf16, so every adapted projection
  makes two throw-away full-size copies of its input (four bytes per element each way).
- `checkpoint_skip_last`: the last N decoder layers keep their activations (no recompute).
- `compile_layers`: `torch.compile` of each decoder layer (fuses norms, rotary, SiLU, dropout).
- `length_chunks` lives in `LensRetriever` (model.py): it changes how a forward is batched.
"""

from __future__ import annotations

import functools
import logging

import torch
from torch import nn

from training.retriever.config import SpeedConfig

log = logging.getLogger(__name__)


def backbone_of(net: nn.Module) -> nn.Module:
    """The LlavaNextModel inside a (peft-wrapped) LlavaNextForConditionalGeneration."""
    base = net.get_base_model() if hasattr(net, "get_base_model") else net
    return base.model


def run_vision_without_graph(backbone: nn.Module) -> None:
    """Make the vision tower's forward run under `torch.no_grad` (it must be wholly frozen)."""
    tower = backbone.vision_tower
    trainable = [n for n, p in tower.named_parameters() if p.requires_grad]
    if trainable:
        raise ValueError(
            f"speed.vision_no_grad needs a frozen vision tower, but {len(trainable)} of its "
            f"parameters train (e.g. {trainable[0]}): does lora.target_regex match it?"
        )
    forward = tower.forward

    @functools.wraps(forward)
    def forward_without_graph(*args, **kwargs):
        with torch.no_grad():
            return forward(*args, **kwargs)

    tower.forward = forward_without_graph  # this instance only; the class is untouched


def skip_checkpointing_last(backbone: nn.Module, n_layers: int) -> None:
    """The last `n_layers` decoder layers run without activation checkpointing."""
    layers = backbone.language_model.layers
    if n_layers > len(layers):
        raise ValueError(f"speed.checkpoint_skip_last={n_layers} but the model has {len(layers)} layers")
    for layer in list(layers)[len(layers) - n_layers :]:
        layer.gradient_checkpointing = False


def keep_lora_input_dtype(net: nn.Module) -> int:
    """Turn off peft's cast of LoRA inputs to the adapter dtype; returns the layers changed."""
    from peft.tuners.lora import LoraLayer

    changed = 0
    for module in net.modules():
        if isinstance(module, LoraLayer):
            module.cast_input_dtype_enabled = False  # read by peft's _cast_input_dtype
            changed += 1
    return changed


def compile_decoder_layers(backbone: nn.Module, backend: str) -> None:
    """`torch.compile` each decoder layer in place (module names and state dict keys unchanged)."""
    for layer in backbone.language_model.layers:
        layer.compile(backend=backend, dynamic=True)  # lengths change from batch to batch


def apply_speed_levers(net: nn.Module, speed: SpeedConfig) -> list[str]:
    """Apply the configured levers to the peft-wrapped model; returns the names applied."""
    backbone = backbone_of(net)
    applied = []
    if speed.vision_no_grad:
        run_vision_without_graph(backbone)
        applied.append("vision_no_grad")
    if speed.lora_no_input_cast:
        keep_lora_input_dtype(net)
        applied.append("lora_no_input_cast")
    if speed.checkpoint_skip_last:
        skip_checkpointing_last(backbone, speed.checkpoint_skip_last)
        applied.append(f"checkpoint_skip_last={speed.checkpoint_skip_last}")
    if speed.compile_layers:
        compile_decoder_layers(backbone, speed.compile_backend)
        applied.append(f"compile_layers({speed.compile_backend})")
    if speed.length_chunks > 1:
        applied.append(f"length_chunks={speed.length_chunks}")
    if applied:
        log.info("speed levers on: %s", ", ".join(applied))
    return applied
