"""VLM2Vec (supp. Tables 1-2) on its LLaVA-Next backbone, `TIGER-Lab/VLM2Vec-LLaVa-Next`.

The supplement's VLM2Vec row is "sourced from [7]" (the VLM2Vec paper). Its Flickr30K numbers
(80.3 / 95.0 / 97.4 and 94.6 / 99.5 / 99.8) are those the VLM2Vec repository notes for its
LLaVA-Next model (`experiments/examples/llava_next/run_eval_flickr_llava_next.sh`: I->T R@1 94.0,
T->I 80.24 with one image instruction; I->T 94.6, T->I 78.98 with another), with the directions
swapped like the other copied rows (docs/evaluation.md, the supp. Tables 1-2 trap). That
checkpoint is a `LlavaNextForConditionalGeneration`, which transformers ships; the Phi-3.5-V one
(VLM2Vec-Full) needs remote code and stays unavailable (`hf_zero_shot.UNAVAILABLE_FAMILIES`).

VLM2Vec's embedding (its `MMEBModel._pooling`, `pooling=last`, `normalize=True`): the final-layer
hidden state of the last attended token, unit-normalised. Inputs as its Flickr30K evaluation
(`src/data/dataset/mmeb_dataset.py`, `FlickrDataset`): an image is "<image> Find an image caption
describing the given image." with the image; a caption is its plain text (empty instruction);
at most 256 tokens. The model directory must hold full weights (a LoRA-only directory is an
error: merge it into its base first). Nothing is downloaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

IMAGE_TEXT = "<image> Find an image caption describing the given image."
MAX_TOKENS = 256


@dataclass
class Vlm2Vec:
    model: Any  # LlavaNextForConditionalGeneration
    processor: Any  # LlavaNextProcessor
    device: torch.device


def load_vlm2vec(path: str, *, device: str = "cpu") -> Vlm2Vec:
    from transformers import LlavaNextForConditionalGeneration, LlavaNextProcessor

    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(
            f"vlm2vec_llava_next baseline: model directory not found: {root} (nothing is downloaded)"
        )
    if not (root / "config.json").is_file():
        raise ValueError(
            f"{root} has no config.json (a LoRA-only directory?): merge the adapter into its base first"
        )
    model = LlavaNextForConditionalGeneration.from_pretrained(str(root), local_files_only=True)
    processor = LlavaNextProcessor.from_pretrained(str(root), local_files_only=True)
    return Vlm2Vec(model.to(device).eval(), processor, torch.device(device))


def last_token(states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, T, d], [B, T] -> [B, d] unit-norm state of each row's last attended token (either padding side)."""
    pos = torch.arange(mask.shape[1], device=mask.device)
    last = (mask.long() * pos).argmax(1)
    return F.normalize(states[torch.arange(states.shape[0], device=states.device), last], dim=-1)


def _embed(bundle: Vlm2Vec, batch: Any) -> torch.Tensor:
    inputs = {k: v.to(bundle.device) for k, v in batch.items()}
    states = bundle.model(**inputs, output_hidden_states=True).hidden_states[-1]
    return last_token(states.float(), inputs["attention_mask"]).cpu()


@torch.no_grad()
def encode_vlm2vec_images(bundle: Vlm2Vec, paths: Sequence[str], batch_size: int = 8) -> torch.Tensor:
    from training.baselines.hf_zero_shot import rgb_images

    out = []
    for i in range(0, len(paths), batch_size):
        images = rgb_images(paths[i : i + batch_size])
        batch = bundle.processor(
            text=[IMAGE_TEXT] * len(images), images=images, padding=True, return_tensors="pt"
        )
        out.append(_embed(bundle, batch))
    return torch.cat(out)


@torch.no_grad()
def encode_vlm2vec_texts(bundle: Vlm2Vec, texts: Sequence[str], batch_size: int = 16) -> torch.Tensor:
    out = []
    for i in range(0, len(texts), batch_size):
        batch = bundle.processor.tokenizer(
            list(texts[i : i + batch_size]),
            padding=True,
            truncation=True,
            max_length=MAX_TOKENS,
            return_tensors="pt",
        )
        out.append(
            _embed(bundle, {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]})
        )
    return torch.cat(out)


def vlm2vec_scores(
    path: str, image_paths: Sequence[str], texts: Sequence[str], *, device: str = "cpu", batch_size: int = 8
) -> np.ndarray:
    """[n_images, n_texts] float32 cosines of VLM2Vec's last-token embeddings."""
    bundle = load_vlm2vec(path, device=device)
    img = encode_vlm2vec_images(bundle, image_paths, batch_size)
    txt = encode_vlm2vec_texts(bundle, texts, 2 * batch_size)
    return (img @ txt.T).numpy().astype(np.float32)
