"""Batched encoding with a (LoRA-)ProjectedClip: image files and texts in, cosine scores out.

Used three ways: by the frozen base model for mining (adapters disabled), by the training loop
for a batch's images, and by the evaluation for IRFL score matrices.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def load_images(paths: Sequence[str], preprocess) -> torch.Tensor:
    """[n, 3, H, W] preprocessed RGB images from files."""
    from PIL import Image

    batch = []
    for path in paths:
        with Image.open(path) as im:
            batch.append(preprocess(im.convert("RGB")))
    return torch.stack(batch)


def _device(model) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def encode_image_files(model, preprocess, paths: Sequence[str], batch_size: int = 64) -> torch.Tensor:
    """[n_images, d] unit-norm image embeddings (float32, CPU)."""
    dev = _device(model)
    out = [
        model.encode_image(load_images(paths[i : i + batch_size], preprocess).to(dev)).float().cpu()
        for i in range(0, len(paths), batch_size)
    ]
    return torch.cat(out)


@torch.no_grad()
def encode_texts(model, tokenizer, texts: Sequence[str], batch_size: int = 64) -> torch.Tensor:
    """[n_texts, d] unit-norm text embeddings (float32, CPU)."""
    dev = _device(model)
    out = [
        model.encode_text(tokenizer(list(texts[i : i + batch_size])).to(dev)).float().cpu()
        for i in range(0, len(texts), batch_size)
    ]
    return torch.cat(out)


def text_image_scores(
    model, preprocess, tokenizer, image_paths: Sequence[str], texts: Sequence[str], batch_size: int = 64
) -> np.ndarray:
    """[n_texts, n_images] cosine scores (model must already be in eval mode)."""
    img = encode_image_files(model, preprocess, image_paths, batch_size)  # [n_images, d]
    txt = encode_texts(model, tokenizer, texts, batch_size)  # [n_texts, d]
    return (txt @ img.T).numpy()
