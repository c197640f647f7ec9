"""Assemble the trainable retriever: base LLaVA-Next + lens tokens + LoRA (peft) + projector.

Trainable: LoRA adapters inside the language model (regex-restricted, so the CLIP tower's
q/k/v projections are never matched), the multi-modal projector (peft `modules_to_save`), and
the six new token rows (peft `trainable_token_indices`, so only those rows of the embedding
matrix get gradients and optimizer state). Everything else, including the vision tower, is frozen.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from training.retriever.config import LoraSection, TrainConfig
from training.retriever.model import LensRetriever, TokenIds, add_lens_tokens
from training.retriever.speed import apply_speed_levers

log = logging.getLogger(__name__)

PROJECTOR = "multi_modal_projector"


def apply_lora(model, cfg: LoraSection, new_token_ids: list[int] | None):
    """Wrap `model` with peft LoRA; returns the PeftModel."""
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(
        r=cfg.r,
        lora_alpha=cfg.alpha,
        lora_dropout=cfg.dropout,
        target_modules=cfg.target_regex,
        modules_to_save=[PROJECTOR],
        trainable_token_indices={"embed_tokens": new_token_ids} if new_token_ids else None,
        bias="none",
    )
    return get_peft_model(model, lora)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_dtype(precision: str, device: torch.device) -> torch.dtype:
    if precision == "bf16" or (precision == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return torch.float32


def enable_checkpointing(model) -> None:
    kwargs = {"use_reentrant": False}  # non-reentrant: works with frozen inputs and LoRA
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def build_retriever(
    cfg: TrainConfig, base_path: str | Path, device: torch.device, *, checkpointing: bool = False
):
    """Load the base from a local directory and return (LensRetriever on device, processor, TokenIds)."""
    from transformers import AutoProcessor, LlavaNextForConditionalGeneration

    dtype = resolve_dtype(cfg.run.precision, device)
    processor = AutoProcessor.from_pretrained(str(base_path))
    processor.tokenizer.padding_side = "right"
    kwargs = {"dtype": dtype}
    if cfg.model.attn_implementation:
        kwargs["attn_implementation"] = cfg.model.attn_implementation
    model = LlavaNextForConditionalGeneration.from_pretrained(str(base_path), **kwargs)
    return assemble_retriever(cfg, model, processor, device, checkpointing=checkpointing)


def assemble_retriever(
    cfg: TrainConfig, model, processor, device: torch.device, *, checkpointing: bool = False
):
    """Lens tokens, checkpointing, LoRA and speed levers on a loaded (or randomly built) base model.

    Returns (LensRetriever on device, processor, TokenIds); `build_retriever` loads the base first.
    """
    dtype = resolve_dtype(cfg.run.precision, device)
    ids: TokenIds = add_lens_tokens(processor.tokenizer, model, cfg.model.noise_sigma, cfg.run.seed)
    if checkpointing:
        enable_checkpointing(model)
    lens_mode = cfg.loss.mode == "lens"
    net = apply_lora(model, cfg.lora, ids.new if lens_mode else None)
    for param in net.parameters():  # trainable weights stay fp32 (mixed precision via autocast)
        if param.requires_grad:
            param.data = param.data.float()
    apply_speed_levers(net, cfg.speed)  # after peft: its hooks and casts are what they undo
    retriever = LensRetriever(net, ids, cfg.loss).to(device)
    retriever.compute_dtype = dtype
    retriever.length_chunks = cfg.speed.length_chunks
    n_train = sum(p.numel() for p in retriever.parameters() if p.requires_grad)
    n_all = sum(p.numel() for p in retriever.parameters())
    log.info(
        "retriever built: %d / %d parameters trainable (%.2f%%)",
        n_train,
        n_all,
        100.0 * n_train / max(n_all, 1),
    )
    return retriever, processor, ids
