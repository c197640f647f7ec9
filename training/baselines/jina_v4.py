"""Jina-v4 (jinaai/jina-embeddings-v4, main Tables 2 and 5) assembled from transformers' Qwen2.5-VL.

The published model is `JinaEmbeddingsV4Config(Qwen2_5_VLConfig)` weights plus PEFT task adapters
in `adapters/` (one LoRA per task and layer: `...<module>.lora_A.<task>.weight`, `lora_B`), run by
its own remote code. Nothing of that code is needed for the single-vector embedding:

- the backbone is `Qwen2_5_VLForConditionalGeneration` read from the directory (transformers maps
  the older `visual.*` / `model.layers.*` checkpoint layout itself); only its `Qwen2_5_VLModel`
  is used;
- the task adapter (`retrieval`, the task the model card uses for text-image retrieval) is merged
  into the base weights: W <- W + s * B @ A with s = lora_alpha / r (lora_alpha / sqrt(r) with
  rsLoRA), which equals the adapter's forward W x + s * B A x at inference (no dropout);
- `single_vector_pool_strategy="mean"`: the mean of the last hidden states, for an image over
  the tokens from <|vision_start|> to <|vision_end|> (inclusive) of the fixed image prompt, for a
  text over every attended token of "Query: <text>" (the model's query prefix, also used for
  captions as candidates: one embedding per caption serves both directions); unit-normalised.

The multi-vector projector (late interaction) is not used. Nothing is downloaded.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

TASK = "retrieval"
TEXT_PREFIX = "Query: "
IMAGE_PROMPT = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe the image.<|im_end|>\n"
# Heads of the multi-vector path: the single-vector embedding never runs them.
UNUSED_MODULES = ("multi_vector_projector", "single_vector_projector")


@dataclass
class JinaV4:
    model: Any  # Qwen2_5_VLModel with the task adapter merged
    processor: Any  # Qwen2_5_VLProcessor
    vision_start: int
    vision_end: int
    device: torch.device
    max_text_tokens: int
    adapter: dict[str, Any] = field(default_factory=dict)  # what was merged, for the run's log


def module_name(key: str) -> str:
    """An adapter's module path in the checkpoint -> the module path in transformers' class."""
    name = re.sub(r"^base_model\.model\.", "", key)
    name = re.sub(r"^visual\.", "model.visual.", name)
    return re.sub(r"^model\.(?!language_model\.|visual\.)", "model.language_model.", name)


def read_task_adapter(adapter_dir: Path, task: str) -> tuple[float, dict[str, dict[str, torch.Tensor]]]:
    """(scaling, {module path: {"A": [r, in], "B": [out, r], optional "bias": [out]}}) of one task."""
    from safetensors.torch import load_file

    cfg_path, weights = adapter_dir / "adapter_config.json", adapter_dir / "adapter_model.safetensors"
    for p in (cfg_path, weights):
        if not p.is_file():
            raise FileNotFoundError(f"Jina-v4 adapter file missing: {p} (nothing is downloaded)")
    cfg = json.loads(cfg_path.read_text())
    r, alpha = int(cfg["r"]), float(cfg["lora_alpha"])
    scaling = alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r
    pattern = re.compile(rf"^(.+)\.lora_(A|B)\.(?:default\.)?{re.escape(task)}\.(weight|bias)$")
    parts: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in load_file(str(weights)).items():
        m = pattern.match(key)
        if m:
            slot = m.group(2) if m.group(3) == "weight" else "bias"
            parts.setdefault(module_name(m.group(1)), {})[slot] = value
    if not parts:
        raise ValueError(f"{weights} has no lora_A/lora_B weights of task {task!r}")
    return scaling, parts


@torch.no_grad()
def merge_task_adapter(model: Any, adapter_dir: Path, task: str = TASK) -> dict[str, Any]:
    """Merge one task's LoRA into `model` (a Qwen2_5_VLForConditionalGeneration) in place."""
    scaling, parts = read_task_adapter(adapter_dir, task)
    modules = dict(model.named_modules())
    merged, skipped = 0, []
    for name, ab in sorted(parts.items()):
        if any(u in name for u in UNUSED_MODULES):
            skipped.append(name)
            continue
        if name not in modules or not isinstance(modules[name], torch.nn.Linear) or set(ab) < {"A", "B"}:
            raise ValueError(
                f"Jina-v4 adapter module {name!r} is not a Linear layer of Qwen2.5-VL (or lacks A/B)"
            )
        layer = modules[name]
        delta = scaling * (ab["B"].double() @ ab["A"].double())
        layer.weight.copy_((layer.weight.double() + delta).to(layer.weight.dtype))
        if "bias" in ab:
            layer.bias.copy_((layer.bias.double() + scaling * ab["bias"].double()).to(layer.bias.dtype))
        merged += 1
    return {"task": task, "scaling": scaling, "n_merged": merged, "skipped": skipped}


def load_jina_v4(path: str, *, device: str = "cpu", max_text_tokens: int = 512) -> JinaV4:
    """The model directory of jinaai/jina-embeddings-v4 (config, weights, processor, adapters/)."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLProcessor

    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(
            f"jina_v4 baseline: model directory not found: {root} (nothing is downloaded)"
        )
    config = Qwen2_5_VLConfig.from_pretrained(str(root), local_files_only=True)
    pool = getattr(config, "single_vector_pool_strategy", "mean")
    if pool != "mean":
        raise ValueError(f"{root}: single_vector_pool_strategy {pool!r}; only 'mean' is implemented")
    full = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(root), config=config, local_files_only=True)
    adapter = merge_task_adapter(full, root / "adapters", TASK)
    processor = Qwen2_5_VLProcessor.from_pretrained(str(root), local_files_only=True)
    return JinaV4(
        full.model.to(device).eval(), processor, int(config.vision_start_token_id),
        int(config.vision_end_token_id), torch.device(device), max_text_tokens, adapter,
    )  # fmt: skip


def image_token_mask(input_ids: torch.Tensor, start_id: int, end_id: int) -> torch.Tensor:
    """[B, T] True from each row's vision-start token to its vision-end token, both included."""
    pos = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
    start = (input_ids == start_id).int().argmax(1, keepdim=True)
    end = (input_ids == end_id).int().argmax(1, keepdim=True)
    if not ((input_ids == start_id).any(1) & (input_ids == end_id).any(1)).all():
        raise ValueError("an image input lacks its vision start or end token")
    return (pos >= start) & (pos <= end)


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, T, d] states, [B, T] mask -> [B, d] unit-norm mean of the masked states."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return F.normalize((hidden * m).sum(1) / m.sum(1), dim=-1)


def _states(bundle: JinaV4, batch: Any) -> torch.Tensor:
    inputs = {k: v.to(bundle.device) for k, v in batch.items()}
    return bundle.model(**inputs).last_hidden_state


@torch.no_grad()
def encode_jina_images(bundle: JinaV4, paths: Sequence[str], batch_size: int = 8) -> torch.Tensor:
    """[n, d] unit-norm image embeddings on the CPU."""
    from training.baselines.hf_zero_shot import rgb_images

    out = []
    for i in range(0, len(paths), batch_size):
        images = rgb_images(paths[i : i + batch_size])
        batch = bundle.processor(
            text=[IMAGE_PROMPT] * len(images), images=images, padding=True, return_tensors="pt"
        )
        mask = image_token_mask(batch["input_ids"], bundle.vision_start, bundle.vision_end)
        out.append(mean_pool(_states(bundle, batch).float(), mask.to(bundle.device)).cpu())
    return torch.cat(out)


@torch.no_grad()
def encode_jina_texts(bundle: JinaV4, texts: Sequence[str], batch_size: int = 16) -> torch.Tensor:
    """[m, d] unit-norm text embeddings ("Query: " prefix, mean over the attended tokens) on the CPU."""
    out = []
    for i in range(0, len(texts), batch_size):
        batch = bundle.processor(
            text=[TEXT_PREFIX + t for t in texts[i : i + batch_size]], padding=True, truncation=True,
            max_length=bundle.max_text_tokens, return_tensors="pt",
        )  # fmt: skip
        states = _states(bundle, batch).float()
        out.append(mean_pool(states, batch["attention_mask"].to(bundle.device)).cpu())
    return torch.cat(out)


def jina_v4_scores(
    path: str, image_paths: Sequence[str], texts: Sequence[str], *, device: str = "cpu", batch_size: int = 8
) -> np.ndarray:
    """[n_images, n_texts] float32 cosines of Jina-v4's single-vector embeddings."""
    bundle = load_jina_v4(path, device=device)
    img = encode_jina_images(bundle, image_paths, batch_size)
    txt = encode_jina_texts(bundle, texts, 2 * batch_size)
    return (img @ txt.T).numpy().astype(np.float32)
