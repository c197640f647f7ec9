"""Tiny models for real-vLLM tests, made from configs and trained briefly on the CPU; cached.

Two models (`python -m tests.realvllm.tiny_models` builds both and prints where):

- `validator`: Qwen2ForCausalLM (Listing 4, text only).
- `internvl`: InternVLForConditionalGeneration, the architecture of OpenGVLab/InternVL3_5-*-HF
  (an InternVL vision tower and a Qwen2 language model), with an InternVLProcessor (GotOcr2 image
  processor, 56 px tiles of 4 tokens each, up to 6 tiles + a thumbnail). Listings 1, 2, 3 and 5.

Both share a byte-level BPE tokenizer trained on their training pairs (tiny_corpus: the project's
prompts answered by its simulator). The attention heads are 64 wide (vLLM's CPU attention needs it).
About 400 steps with the loss on the answer tokens only are enough for answers that parse.

Built models live in ~/.cache/lenses/tiny-models/<name>-<hash>/, the hash covering this kit's
sources, the prompt templates, lenses_data/answers.py and the torch/transformers/tokenizers versions.
A build happens in a temporary folder renamed into place under a file lock, so concurrent test
sessions wait for one build and never see half a model.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib
import json
import math
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

CACHE_ROOT = Path(os.environ.get("LENSES_TINY_MODELS", Path.home() / ".cache" / "lenses" / "tiny-models"))
KIT_DIR = Path(__file__).resolve().parent
KIT_SOURCES = ("tiny_corpus.py", "tiny_tokenizer.py", "tiny_models.py")
TILE_PX = 56
PATCH_PX = 14
DOWNSAMPLE = 0.5
TOKENS_PER_TILE = int((TILE_PX // PATCH_PX) ** 2 * DOWNSAMPLE**2)
MAX_TILES = 6
HIDDEN = 128
HEADS = 2  # head_dim 64
MAX_POSITIONS = 4096
INTERNVL_ROLES = ("filter", "generator", "visual_validator")
_PUNCTUATION = re.compile(r"[^\w\s]+")


@dataclass(frozen=True)
class TrainSettings:
    steps: int = 400
    lr: float = 3e-3
    warmup: int = 20
    seed: int = 0


# ---------------------------------------------------------------------------------------------
# Cache


def kit_hash() -> str:
    """Hash of what decides a built model: kit sources, prompts, answer formats, library versions."""
    from lenses_data.annotation.prompts import all_prompt_hashes

    digest = hashlib.sha256()
    for name in KIT_SOURCES:
        digest.update((KIT_DIR / name).read_bytes())
    answers = Path(importlib.import_module("lenses_data.annotation.answers").__file__ or "")
    digest.update(answers.read_bytes())
    digest.update(json.dumps(all_prompt_hashes(), sort_keys=True).encode())
    for package in ("torch", "transformers", "tokenizers"):
        digest.update(f"{package}={version(package)}".encode())
    return digest.hexdigest()[:16]


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def cached(name: str, build: Callable[[Path], None], root: Path | None = None) -> Path:
    """`root/<name>-<hash>`, built by `build(temp_dir)` once and renamed into place atomically."""
    root = root or CACHE_ROOT
    final = root / f"{name}-{kit_hash()}"
    if (final / "BUILT").exists():
        return final
    with _locked(root / f".{final.name}.lock"):
        if (final / "BUILT").exists():
            return final
        temp = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=root))
        try:
            build(temp)
            (temp / "BUILT").write_text(time.strftime("%Y-%m-%dT%H:%M:%S\n"))
            temp.chmod(0o755)
            os.rename(temp, final)
        finally:
            shutil.rmtree(temp, ignore_errors=True)
    return final


# ---------------------------------------------------------------------------------------------
# Corpus and tokenizer


def corpus_dir() -> Path:
    from tests.realvllm.tiny_corpus import build_corpus

    return cached("corpus", lambda folder: build_corpus(folder))


def tokenizer_texts(examples: list[Any], instruction_weight: int = 20) -> list[str]:
    """The BPE's training texts: each distinct instruction text `instruction_weight` times (so its
    merges win), every answer and item list once; punctuation replaced by line breaks.

    Without punctuation in its texts the BPE learns no merges like `"},{"` or `"Caption`: JSON's
    structural characters stay single tokens, so under a server's JSON grammar the token the model
    prefers is always one the grammar can allow (a merged `"},{"` refused after an enum value left
    the model writing whitespace until max_tokens)."""
    texts = sorted({e.instructions for e in examples}) * instruction_weight
    texts += [e.answer for e in examples] + [e.items for e in examples if e.items]
    return [_PUNCTUATION.sub("\n", text) for text in texts]


def _content(example: Any, image_first: bool) -> str:
    """The user turn as vLLM's `string` content format renders it (instructions, image, items)."""
    from tests.realvllm.tiny_tokenizer import IMAGE_PLACEHOLDER

    if example.image is None:
        return "\n\n".join(t for t in (example.instructions, example.items) if t)
    parts = [example.instructions, example.items] if example.items else [example.instructions]
    parts.insert(0 if image_first else 1, IMAGE_PLACEHOLDER)
    return "\n".join(parts)


def prompt_text(tokenizer: Any, example: Any, image_first: bool = False) -> str:
    messages = [{"role": "user", "content": _content(example, image_first)}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


# ---------------------------------------------------------------------------------------------
# Model configs


def text_config(tokenizer: Any) -> Any:
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=64 * math.ceil(len(tokenizer) / 64),
        hidden_size=HIDDEN,
        intermediate_size=4 * HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def internvl_config(tokenizer: Any) -> Any:
    from transformers import InternVLConfig, InternVLVisionConfig

    vision = InternVLVisionConfig(
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=HEADS,
        intermediate_size=2 * HIDDEN,
        image_size=[TILE_PX, TILE_PX],
        patch_size=[PATCH_PX, PATCH_PX],
    )
    return InternVLConfig(
        vision_config=vision.to_dict(),
        text_config=text_config(tokenizer).to_dict(),
        image_token_id=tokenizer.context_image_token_id,
        image_seq_length=TOKENS_PER_TILE,
        downsample_ratio=DOWNSAMPLE,
        tie_word_embeddings=True,
    )


def internvl_processor(tokenizer: Any) -> Any:
    from transformers import GotOcr2ImageProcessor, InternVLProcessor, InternVLVideoProcessor

    from tests.realvllm.tiny_tokenizer import CHAT_TEMPLATE

    size = {"height": TILE_PX, "width": TILE_PX}
    images = GotOcr2ImageProcessor(crop_to_patches=True, min_patches=1, max_patches=MAX_TILES, size=size)
    videos = InternVLVideoProcessor(size=size)
    return InternVLProcessor(
        image_processor=images,
        tokenizer=tokenizer,
        video_processor=videos,
        image_seq_length=TOKENS_PER_TILE,
        chat_template=CHAT_TEMPLATE,
    )


# ---------------------------------------------------------------------------------------------
# Training


def answer_ids(tokenizer: Any, example: Any) -> list[int]:
    return tokenizer(example.answer, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]


def text_sample(tokenizer: Any, example: Any) -> dict[str, Any]:
    import torch

    prompt = tokenizer(prompt_text(tokenizer, example), add_special_tokens=False).input_ids
    answer = answer_ids(tokenizer, example)
    ids = torch.tensor([prompt + answer])
    labels = torch.tensor([[-100] * len(prompt) + answer])
    return {"input_ids": ids, "labels": labels}


def image_sample(processor: Any, example: Any, rng: random.Random) -> dict[str, Any]:
    """Prompt with the image expanded by the processor (one tile or full tiling), then the answer."""
    import torch
    from PIL import Image

    tokenizer = processor.tokenizer
    text = prompt_text(tokenizer, example, image_first=rng.random() < 0.3)
    image = Image.open(example.image).convert("RGB")
    tiles = 1 if rng.random() < 0.4 else MAX_TILES
    inputs = processor(text=[text], images=[image], return_tensors="pt", max_patches=tiles)
    answer = torch.tensor([answer_ids(tokenizer, example)])
    ids = torch.cat([inputs["input_ids"], answer], dim=1)
    labels = torch.cat([torch.full_like(inputs["input_ids"], -100), answer], dim=1)
    return {"input_ids": ids, "labels": labels, "pixel_values": inputs["pixel_values"]}


def lr_at(step: int, settings: TrainSettings) -> float:
    if step < settings.warmup:
        return settings.lr * (step + 1) / settings.warmup
    progress = (step - settings.warmup) / max(1, settings.steps - settings.warmup)
    return settings.lr * 0.5 * (1 + math.cos(math.pi * progress))


def answer_loss(model: Any, sample: dict[str, Any]) -> Any:
    """Cross-entropy on the answer tokens (the sequence's tail); logits only where they count."""
    import torch

    labels = sample.pop("labels")
    answer = int((labels != -100).sum())
    logits = model(**sample, logits_to_keep=answer + 1).logits[:, :-1]
    target = sample["input_ids"][:, -answer:]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1))


def train(model: Any, make_sample: Callable[[int], dict[str, Any]], settings: TrainSettings) -> list[float]:
    """`settings.steps` AdamW steps, one example each; returns the loss per step."""
    import torch

    torch.manual_seed(settings.seed)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=0.0)
    losses = []
    for step in range(settings.steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, settings)
        loss = answer_loss(model, make_sample(step))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
        if step % 50 == 49:
            print(f"step {step + 1}: loss {sum(losses[-50:]) / 50:.3f}", file=sys.stderr, flush=True)
    model.eval()
    return losses


def _write_info(folder: Path, name: str, losses: list[float], started: float, examples: int) -> None:
    tail = losses[-20:]
    info = {
        "name": name,
        "examples": examples,
        "steps": len(losses),
        "first_loss": round(losses[0], 4),
        "final_loss": round(sum(tail) / len(tail), 4),
        "train_seconds": round(time.monotonic() - started, 1),
        "kit_hash": kit_hash(),
    }
    (folder / "lenses-tiny-model.json").write_text(json.dumps(info, indent=1) + "\n")


def _generation_config(folder: Path, tokenizer: Any) -> None:
    from transformers import GenerationConfig

    config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    config.save_pretrained(folder)


def _setup_torch(seed: int) -> random.Random:
    import torch

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    torch.manual_seed(seed)
    return random.Random(seed)


def build_validator(folder: Path, settings: TrainSettings | None = None) -> None:
    """Qwen2ForCausalLM trained on Listing 4 pairs; saved with its tokenizer."""
    from transformers import AutoTokenizer, Qwen2ForCausalLM

    from tests.realvllm.tiny_corpus import load_corpus
    from tests.realvllm.tiny_tokenizer import build_tokenizer

    settings = settings or TrainSettings()
    rng = _setup_torch(settings.seed)
    examples = load_corpus(corpus_dir())
    built = build_tokenizer(tokenizer_texts(examples))
    chosen = [e for e in examples if e.role == "validator"]
    model = Qwen2ForCausalLM(text_config(built))
    model.config.save_pretrained(folder)
    built.save_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)  # as vLLM will load it
    started = time.monotonic()
    losses = train(model, lambda _step: text_sample(tokenizer, rng.choice(chosen)), settings)
    model.save_pretrained(folder)
    _generation_config(folder, tokenizer)
    _write_info(folder, "validator", losses, started, len(chosen))


def build_internvl(folder: Path, settings: TrainSettings | None = None) -> None:
    """InternVLForConditionalGeneration trained on Listings 1, 2, 3 and 5; saved with its processor."""
    from transformers import AutoProcessor, InternVLForConditionalGeneration

    from tests.realvllm.tiny_corpus import load_corpus
    from tests.realvllm.tiny_tokenizer import build_tokenizer

    settings = settings or TrainSettings()
    rng = _setup_torch(settings.seed)
    examples = load_corpus(corpus_dir())
    built = build_tokenizer(tokenizer_texts(examples))
    chosen = [e for e in examples if e.role in INTERNVL_ROLES]
    model = InternVLForConditionalGeneration(internvl_config(built))
    model.config.save_pretrained(folder)
    internvl_processor(built).save_pretrained(folder)
    processor = AutoProcessor.from_pretrained(folder)  # as vLLM will load it
    started = time.monotonic()
    losses = train(model, lambda _step: image_sample(processor, rng.choice(chosen), rng), settings)
    model.save_pretrained(folder)
    _generation_config(folder, processor.tokenizer)
    _write_info(folder, "internvl", losses, started, len(chosen))


BUILDERS: dict[str, Callable[[Path], None]] = {"validator": build_validator, "internvl": build_internvl}


def tiny_model(name: str) -> Path:
    """The cached model folder of `name` ("validator" or "internvl"), built when missing."""
    return cached(f"tiny-{name}", BUILDERS[name])


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    for wanted in sys.argv[1:] or list(BUILDERS):
        began = time.monotonic()
        where = tiny_model(wanted)
        print(f"{wanted}: {where} ({time.monotonic() - began:.0f}s)")
