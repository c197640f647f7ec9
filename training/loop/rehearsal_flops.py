"""FLOPs of one training micro-batch, per component: model FLOPs (the basis of MFU) and hardware
FLOPs (the basis of HFU). The derivation is in docs/training.md#flops-per-micro-batch; in short:

A matmul weight of N entries costs 2 N FLOPs per token it is applied to, forward; backward costs
2 N more for the gradient of its input (when something before it needs one) and 2 N more for the
gradient of the weight itself (when the weight trains). So, per token:

    component (N: its matmul weights)         model FLOPs     hardware FLOPs
    frozen LM base, decoder layers            4 N             4 N + 2 N in checkpointed layers
    LoRA adapters A and B (trained)           6 N             6 N + 2 N in checkpointed layers
    projector (trained; its first layer's     4 N + 2 N_2     4 N + 2 N_2, + 2 N_1 when the tower
      input comes from the frozen tower, so                   has a graph
      that layer's input gradient is waste)
    CLIP tower (frozen, before every          2 N             2 N, + 2 N backward (+ 2 N recompute
      trained weight: forward only)                           when checkpointed) in the layers the
                                                              loss reaches, when the tower has a graph

Model FLOPs count real (unpadded) tokens; hardware FLOPs count the tokens the GPU computes: the
padded width of every forward (per length chunk with `speed.length_chunks`) and the recompute of
activation checkpointing, read from the built model (each decoder layer's `gradient_checkpointing`
flag, so `checkpoint_skip_last` is followed; a layer's last matmul is not recomputed, see
`matmul_weights`). "The tower has a graph" when checkpointing is on and
`speed.vision_no_grad` is off: peft then hooks the tower's patch embedding to require a gradient,
so the frozen tower is recomputed and backpropagated for nothing. Token embedding lookups, norms,
the loss and attention's O(L^2) score and value products are left out (attention adds ~10% at
~3,000-token inputs), in both counts alike. tests/training/loop/test_rehearsal_flops.py compares
the hardware count with torch's own FLOP counter on the tiny model, lever by lever.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

_LM_LAYER = re.compile(r"language_model\.layers\.(\d+)\.")
_VISION_LAYER = re.compile(r"vision_tower\..*layers\.(\d+)\.")


@dataclass(frozen=True)
class MatmulWeights:
    """Matmul weight entries of the built retriever by role (biases, norms and lookups left out)."""

    lm_base: int  # frozen decoder-layer projections, all layers
    lora: int  # LoRA A and B matrices, all layers
    lm_base_recomputed: int  # of lm_base: run again in backward by checkpointed layers
    lora_recomputed: int
    projector: int  # the trained copy that runs (peft's modules_to_save), not the frozen original
    projector_first: int  # of projector: the layer fed by the tower (its input gradient is waste)
    vision: int  # CLIP encoder-layer projections, all layers (all run forward)
    vision_reached: int  # of vision: layers before `vision_feature_layer`, which the loss reaches
    vision_recomputed: int  # of vision_reached: run again in backward by checkpointed layers
    patch_embedding: int  # the patch convolution (runs once per patch, forward only)
    vision_graph: bool  # the frozen tower builds an autograd graph (see the module docstring)
    lm_layers: int
    lm_layers_checkpointed: int


@dataclass(frozen=True)
class TokenCounts:
    """Tokens of one micro-batch (means over the rehearsal's batches)."""

    lm_real: float  # unpadded tokens of the image and caption inputs
    lm_padded: float  # tokens the decoder computes: rows x padded width of every forward
    vision: float  # CLIP tokens: tiles x (patches + CLS)
    patches: float  # tiles x patches (patch convolution; the projector's inputs)


def _linear_weights(retriever):
    import torch

    for name, module in retriever.named_modules():
        if type(module) in (torch.nn.Linear, torch.nn.Conv2d):
            yield name, module


def _checkpointed(retriever, pattern: re.Pattern) -> set[int]:
    """Indices of the layers (matched by `pattern`) whose `gradient_checkpointing` flag is set."""
    found = set()
    for name, module in retriever.named_modules():
        match = pattern.search(name + ".")
        if (
            match
            and name.endswith(f"layers.{match.group(1)}")
            and getattr(module, "gradient_checkpointing", False)
        ):
            found.add(int(match.group(1)))
    return found


def _last_of_each_layer(retriever) -> set[str]:
    """Names of the last matmul of every decoder and encoder layer, in call order (= registration
    order for Mistral's and CLIP's layers): the one a checkpointed layer does not recompute."""
    last: dict[str, str] = {}
    for name, _ in _linear_weights(retriever):
        match = _LM_LAYER.search(name) or _VISION_LAYER.search(name)
        if match:
            last[name[: match.end()]] = name
    return set(last.values())


def matmul_weights(retriever, checkpointing: bool, vision_no_grad: bool) -> MatmulWeights:
    """Count the built retriever's matmul weights by the role each plays in a training step.

    Recomputed weights: torch's non-reentrant checkpoint stops recomputing a layer once the tensors
    its backward needs are back, so the layer's last matmul (whose output nothing saves: it feeds
    the residual add) is not run again: `down_proj`'s LoRA B in a decoder layer, `fc2` in CLIP's."""
    config = retriever.net.get_base_model().config
    lm_ckpt = _checkpointed(retriever, _LM_LAYER) if checkpointing else set()
    vis_ckpt = _checkpointed(retriever, _VISION_LAYER) if checkpointing else set()
    n_vision_layers = config.vision_config.num_hidden_layers
    feature_layer = config.vision_feature_layer
    feature_layer = min(feature_layer) if isinstance(feature_layer, list) else feature_layer
    # hidden_states[k] is the output of layer k-1: the loss reaches layers below that index
    reached = n_vision_layers + 1 + feature_layer if feature_layer < 0 else feature_layer
    counts = dict.fromkeys(
        ("lm_base", "lora", "lm_base_ckpt", "lora_ckpt", "projector", "projector_first"), 0
    )
    counts.update(dict.fromkeys(("vision", "vision_reached", "vision_ckpt", "patch", "other"), 0))
    lm_layers, not_recomputed = set(), _last_of_each_layer(retriever)
    for name, module in _linear_weights(retriever):
        n = module.weight.numel()
        again = 0 if name in not_recomputed else n
        if "vision_tower" in name:
            layer = _VISION_LAYER.search(name)
            if layer is None:
                counts["patch" if "patch_embedding" in name else "other"] += n
                continue
            index = int(layer.group(1))
            counts["vision"] += n
            counts["vision_reached"] += n if index < reached else 0
            counts["vision_ckpt"] += again if index < reached and index in vis_ckpt else 0
        elif "multi_modal_projector" in name:
            if "original_module" not in name:  # peft's frozen copy never runs
                counts["projector_first"] = counts["projector_first"] or n  # modules in call order
                counts["projector"] += n
        elif (layer := _LM_LAYER.search(name)) is not None:
            kind = "lora" if ".lora_" in name else "lm_base"
            lm_layers.add(int(layer.group(1)))
            counts[kind] += n
            counts[f"{kind}_ckpt"] += again if int(layer.group(1)) in lm_ckpt else 0
        elif not name.endswith("lm_head"):  # the retriever reads hidden states: lm_head never runs
            counts["other"] += n
    if counts["other"]:
        raise ValueError(
            f"{counts['other']} matmul weights of an unknown role: the FLOPs count needs updating"
        )
    return MatmulWeights(
        counts["lm_base"], counts["lora"], counts["lm_base_ckpt"], counts["lora_ckpt"], counts["projector"],
        counts["projector_first"], counts["vision"], counts["vision_reached"], counts["vision_ckpt"], counts["patch"],
        checkpointing and not vision_no_grad, len(lm_layers), len(lm_ckpt & lm_layers),
    )  # fmt: skip


def flops_per_micro_batch(w: MatmulWeights, t: TokenCounts) -> dict:
    """{"model": {...}, "hardware": {...}}: FLOPs per component and their total."""
    model = {
        "lm_base": 4 * w.lm_base * t.lm_real,
        "lora": 6 * w.lora * t.lm_real,
        "projector": (6 * w.projector - 2 * w.projector_first) * t.patches,
        "vision": 2 * w.vision * t.vision + 2 * w.patch_embedding * t.patches,
    }
    recompute = 2 * (w.lm_base_recomputed + w.lora_recomputed) * t.lm_padded
    tower_backward = (2 * w.vision_reached + 2 * w.vision_recomputed) * t.vision if w.vision_graph else 0
    hardware = {
        "lm_base": 4 * w.lm_base * t.lm_padded,
        "lora": 6 * w.lora * t.lm_padded,
        "lm_recompute": recompute,
        "projector": (6 * w.projector - 2 * w.projector_first * (not w.vision_graph)) * t.patches,
        "vision": model["vision"] + tower_backward,
    }
    return {
        "model": {**model, "total": sum(model.values())},
        "hardware": {**hardware, "total": sum(hardware.values())},
    }


def padded_tokens(attention_mask, length_chunks: int) -> int:
    """Tokens one encoder forward computes: rows x padded width, per length-sorted sub-batch when
    `speed.length_chunks` > 1 (as LensRetriever._in_length_chunks cuts them; right padding)."""
    rows, width = attention_mask.shape
    if length_chunks <= 1 or rows <= 1:
        return rows * width
    lengths = sorted((int(n) for n in attention_mask.sum(dim=1)), reverse=True)
    size = -(-rows // length_chunks)  # torch.chunk's sub-batch size
    return sum(len(part) * part[0] for part in (lengths[i : i + size] for i in range(0, rows, size)))


def weights_dict(w: MatmulWeights) -> dict:
    return asdict(w)
