"""CLIP image embeddings with open_clip: batched, L2-normalised, CPU or GPU.

The model comes from config: an open_clip architecture name (optionally registered from a local
JSON config file) and a local checkpoint path, built with the activation its weights need
(`clip_model.py`). Nothing is downloaded: with no checkpoint the CLIP signal is off, unless
`clip_random_weights` is set, which exists only to test the mechanics and is announced loudly in
every summary.

Speed: images are decoded and preprocessed by a thread pool two batches ahead of the encoder
(`clip_views.py`); on CUDA the encoder runs under bf16 autocast at batch 256 by default (the
embedding is returned in float32 and L2-normalised in float32).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lenses_data.config.dedupe import CLIP_BATCH_CPU, CLIP_BATCH_CUDA, DedupeConfig
from lenses_data.dedupe.clip_model import load_model

__all__ = [
    "EmbedPlan",
    "EmbedResult",
    "clip_status",
    "embed_images",
    "embed_plan",
    "load_model",
    "resolve_device",
]

log = logging.getLogger(__name__)


@dataclass
class EmbedResult:
    embeddings: np.ndarray  # float32 (n_ok, dim), L2-normalised, rows in input order of successes
    ok: np.ndarray  # bool mask over the inputs
    errors: dict[int, str]  # input index -> error message
    model: str
    device: str
    settings: dict[str, Any] = field(default_factory=dict)  # activation, precision, batch, workers


def clip_status(config: DedupeConfig) -> str:
    """'off', 'on' or 'random-weights' (mechanics tests only)."""
    if config.clip_checkpoint:
        return "on"
    if config.clip_random_weights:
        return "random-weights"
    return "off"


def resolve_device(wanted: str) -> str:
    import torch

    if wanted == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return wanted


@dataclass(frozen=True)
class EmbedPlan:
    """How the images are run through the model (speed and rounding only, never which images)."""

    device: str
    precision: str  # "fp32" or "bf16" (autocast)
    batch_size: int
    decode_workers: int
    jpeg_draft: bool


def embed_plan(config: DedupeConfig, device: str) -> EmbedPlan:
    """Config values with `auto`/None resolved for the device: bf16 and 256 on CUDA, fp32 and 64 on the CPU."""
    precision = config.clip_precision
    if precision == "auto":
        precision = "bf16" if device.startswith("cuda") else "fp32"
    size = config.clip_batch_size
    if size is None:
        size = CLIP_BATCH_CUDA if device.startswith("cuda") else CLIP_BATCH_CPU
    workers = config.clip_decode_workers or min(os.cpu_count() or 1, 32)
    return EmbedPlan(device, precision, size, workers, config.clip_jpeg_draft)


def encode(model, x, precision: str):
    """L2-normalised float32 image features; bf16 autocast when asked (weights stay float32)."""
    import torch

    with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
        features = model.encode_image(x)
    return torch.nn.functional.normalize(features.float(), dim=-1)


def model_input_side(model) -> int:
    size = model.visual.image_size
    return int(max(size) if isinstance(size, (tuple, list)) else size)


def embed_with_model(
    paths: Sequence[str], model, preprocess, plan: EmbedPlan
) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
    """(float32 L2-normalised rows of the images that worked, ok mask, index -> error)."""
    import torch

    from lenses_data.dedupe.clip_views import iter_view_batches, plan_from_transform, to_model_input

    tensors = plan_from_transform(preprocess)
    draft_side = model_input_side(model) if plan.jpeg_draft else None
    errors: dict[int, str] = {}
    chunks: list[np.ndarray] = []
    ok = np.zeros(len(paths), dtype=bool)
    batches = iter_view_batches(paths, tensors, plan.batch_size, plan.decode_workers, draft_side)
    with torch.inference_mode():
        for batch in batches:
            errors.update(batch.errors)
            if not batch.views:
                continue
            x = to_model_input(batch.views, tensors, plan.device)
            features = encode(model, x, plan.precision).cpu().numpy()
            bad = ~np.isfinite(features).all(axis=1)
            for row, index in enumerate(batch.indices):
                if bad[row]:
                    errors[index] = "embedding is not finite"
                else:
                    ok[index] = True
            chunks.append(features[~bad])
            log.debug("embedded %d/%d images", batch.start + len(batch.views), len(paths))
    dim = chunks[0].shape[1] if chunks else 0
    embeddings = np.concatenate(chunks) if chunks else np.zeros((0, dim), dtype=np.float32)
    return embeddings.astype(np.float32), ok, errors


def embed_images(paths: Sequence[str], config: DedupeConfig) -> EmbedResult:
    """Embed every image; returns float32 L2-normalised rows for the images that worked."""
    device = resolve_device(config.clip_device)
    model, preprocess, activation = load_model(config, device)
    plan = embed_plan(config, device)
    embeddings, ok, errors = embed_with_model(paths, model, preprocess, plan)
    settings = {
        "activation": activation.name,
        "activation_reason": activation.reason,
        "precision": plan.precision,
        "batch_size": plan.batch_size,
        "decode_workers": plan.decode_workers,
        "jpeg_draft": plan.jpeg_draft,
    }
    return EmbedResult(embeddings, ok, errors, config.clip_model, device, settings)
