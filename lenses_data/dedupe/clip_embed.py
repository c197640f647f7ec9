"""CLIP image embeddings with open_clip: batched, L2-normalised, CPU or GPU.

The model comes from config: an open_clip architecture name (optionally registered from a local
JSON config file) and a local checkpoint path. Nothing is downloaded: with no checkpoint the
CLIP signal is off, unless `clip_random_weights` is set, which exists only to test the mechanics
and is announced loudly in every summary.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lenses_data.config.dedupe import DedupeConfig

log = logging.getLogger(__name__)


@dataclass
class EmbedResult:
    embeddings: np.ndarray  # float32 (n_ok, dim), L2-normalised, rows in input order of successes
    ok: np.ndarray  # bool mask over the inputs
    errors: dict[int, str]  # input index -> error message
    model: str
    device: str


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


def load_model(config: DedupeConfig, device: str):
    """(model, preprocess) from a local checkpoint, or random weights when explicitly allowed."""
    import open_clip

    if config.clip_model_config:
        open_clip.add_model_config(config.clip_model_config)
    checkpoint = config.clip_checkpoint
    if checkpoint and not Path(checkpoint).is_file():
        raise FileNotFoundError(f"dedupe.clip_checkpoint: no such file {checkpoint}")
    if not checkpoint and not config.clip_random_weights:
        raise ValueError("CLIP signal is off: set dedupe.clip_checkpoint to a local checkpoint file")
    model, _, preprocess = open_clip.create_model_and_transforms(
        config.clip_model, pretrained=checkpoint or None, device=device
    )
    model.eval()
    return model, preprocess


def _load_batch(paths: Sequence[str], preprocess, offset: int, errors: dict[int, str]):
    from lenses_data.candidates.imaging import load_rgb

    tensors, indices = [], []
    for i, path in enumerate(paths):
        try:
            tensors.append(preprocess(load_rgb(path)))
            indices.append(offset + i)
        except Exception as error:  # one unreadable image is a rejection, not a failed run
            errors[offset + i] = f"{type(error).__name__}: {error}"
    return tensors, indices


def embed_images(paths: Sequence[str], config: DedupeConfig) -> EmbedResult:
    """Embed every image; returns float32 L2-normalised rows for the images that worked."""
    import torch

    device = resolve_device(config.clip_device)
    model, preprocess = load_model(config, device)
    errors: dict[int, str] = {}
    chunks: list[np.ndarray] = []
    ok = np.zeros(len(paths), dtype=bool)
    size = config.clip_batch_size
    with torch.inference_mode():
        for start in range(0, len(paths), size):
            tensors, indices = _load_batch(paths[start : start + size], preprocess, start, errors)
            if not tensors:
                continue
            features = model.encode_image(torch.stack(tensors).to(device)).float()
            features = torch.nn.functional.normalize(features, dim=-1).cpu().numpy()
            bad = ~np.isfinite(features).all(axis=1)
            for row, index in enumerate(indices):
                if bad[row]:
                    errors[index] = "embedding is not finite"
                else:
                    ok[index] = True
            chunks.append(features[~bad])
            log.debug("embedded %d/%d images", min(start + size, len(paths)), len(paths))
    dim = chunks[0].shape[1] if chunks else 0
    embeddings = np.concatenate(chunks) if chunks else np.zeros((0, dim), dtype=np.float32)
    return EmbedResult(embeddings.astype(np.float32), ok, errors, config.clip_model, device)
