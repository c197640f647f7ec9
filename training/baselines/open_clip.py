"""The zero-shot open_clip baseline: a model from local files only, and its unit-norm embeddings.

Score them with `training.baselines.global_only.global_scores`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F


def load_open_clip(
    model_name: str,
    *,
    pretrained: str | None = None,
    model_config: str | None = None,
    device: str = "cpu",
):
    """(model, preprocess, tokenizer) of an open_clip model from local files only.

    `pretrained` must be a local checkpoint file (nothing is downloaded) or None for random
    weights; `model_config` is an optional JSON architecture file registered under its stem.
    """
    import open_clip

    if model_config is not None:
        cfg = Path(model_config)
        if not cfg.is_file():
            raise FileNotFoundError(f"open_clip model config not found: {cfg}")
        open_clip.add_model_config(cfg)
        model_name = cfg.stem
    if pretrained is not None and not Path(pretrained).is_file():
        raise FileNotFoundError(
            f"pretrained must be a local open_clip checkpoint file; not found: {pretrained}"
        )
    model, _, preprocess = open_clip.create_model_and_transforms(
        model_name, pretrained=pretrained, device=device, pretrained_text=False
    )
    model.eval()
    return model, preprocess, open_clip.get_tokenizer(model_name)


@torch.no_grad()
def encode_open_clip(
    model, preprocess, tokenizer, image_paths: Sequence[str], texts: Sequence[str], *, batch_size: int = 64
) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit-norm image and text embeddings from an open_clip model."""
    from PIL import Image

    device = next(model.parameters()).device
    images = []
    for i in range(0, len(image_paths), batch_size):
        batch = []
        for path in image_paths[i : i + batch_size]:
            with Image.open(path) as im:
                batch.append(preprocess(im.convert("RGB")))
        images.append(model.encode_image(torch.stack(batch).to(device)).float().cpu())
    txt = [
        model.encode_text(tokenizer(list(texts[i : i + batch_size])).to(device)).float().cpu()
        for i in range(0, len(texts), batch_size)
    ]
    return F.normalize(torch.cat(images), dim=-1), F.normalize(torch.cat(txt), dim=-1)
