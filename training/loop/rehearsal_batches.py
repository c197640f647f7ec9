"""Synthetic micro-batches of the real shapes for the training rehearsal.

Images are random RGB pictures of `data.image_size` (what the loader resizes every image to), so
the processor tiles them as it tiles real ones; prompts and captions are filler words cut to a
token length, and everything goes through the real `Collator`. The number of prompts of each image
is drawn, per image, from the paper's distribution as the simulator models it
(`lenses_data.simulator.simlenses.lens_counts` with `SimContentSettings`: 001 Table 1's 6.93 texts
per image and its lens mix, each lens 0 or 1-3 texts, thinned by the validation discards), so the
image inputs of a micro-batch differ in length and pad to their longest, as real batches do; a
fixed count (`Shape(prompts_per_image=6)`, the previous default) gives every input the same length.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from training.loop.inputs import Collator
from training.retriever.config import DataConfig

FILLER = (
    "what does the old street at night feel like under the calm wide sky with a cat on a mat "
    "near coins and a rocket and a coffee cup in soft light"
).split()


@dataclass(frozen=True)
class Shape:
    """Per-image text shape, in tokens of the text itself. Prompts per image: None draws them per
    image from the paper's distribution (module docstring); a number fixes them. Lengths: those of
    the previous GPU measurement (prompts of ~22 tokens; caption text of ~58 tokens: ~80-token
    caption inputs with the instruction, lens tags and EOS); `worst_case` takes the config's limits
    (max_prompts_per_image prompts, max_caption_tokens captions) instead."""

    prompts_per_image: int | None = None
    prompt_tokens: int = 22
    caption_tokens: int = 58

    @classmethod
    def worst_case(cls, data: DataConfig) -> Shape:
        return cls(data.max_prompts_per_image, 22, data.max_caption_tokens)


def filler_text(tokenizer, n_tokens: int, offset: int = 0) -> str:
    """Filler words whose tokenization (without specials) is about `n_tokens` long, at least one word."""
    words: list[str] = []
    while True:
        words.append(FILLER[(offset + len(words)) % len(FILLER)])
        if len(tokenizer(" ".join(words), add_special_tokens=False)["input_ids"]) >= n_tokens:
            return " ".join(words)


def texts_for(tokenizer, shape: Shape) -> list[str]:
    """Filler texts of the shape's lengths (the tokenizer-independent words of FILLER)."""
    return [filler_text(tokenizer, shape.prompt_tokens), filler_text(tokenizer, shape.caption_tokens, 3)]


def paper_prompt_lenses(rng: random.Random, content=None) -> list[int]:
    """Lens indices of one image's prompts, drawn as the simulator writes and validates them: each
    lens 0 or 1 + Binomial(2, q) texts (lens_counts), each kept with the validation's survival
    rate. An image left with none (about 1 in 10^9) is drawn again."""
    from lenses_data.config.simulator import SimContentSettings
    from lenses_data.simulator.simlenses import lens_counts, survival

    content = content or SimContentSettings()
    keep = survival(content)
    while True:
        counts = lens_counts(rng, content)
        lenses = [k for k, n in enumerate(counts.values()) for _ in range(n) if rng.random() < keep]
        if lenses:
            return lenses


def synthetic_items(
    n_images: int, data: DataConfig, prompt: str, caption: str, seed: int, fixed=None
) -> list:
    """(index, PIL image, prompts, captions) items as the dataset yields them: `fixed` prompts per
    image with lenses in turn, or (None) a count and lenses drawn per image (paper_prompt_lenses)."""
    from PIL import Image

    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    size = data.image_size
    items = []
    for i in range(n_images):
        pixels = torch.randint(0, 256, (size, size, 3), generator=gen, dtype=torch.uint8).numpy()
        lenses = [k % 5 for k in range(fixed)] if fixed is not None else paper_prompt_lenses(rng)
        prompts = [(prompt, lens) for lens in lenses]
        captions = [(caption, (i + k) % 5) for k in range(data.captions_per_image)]
        items.append((i, Image.fromarray(pixels, "RGB"), prompts, captions))
    return items


def synthetic_batches(
    processor, data: DataConfig, lens_mode: bool, shape: Shape, n_batches: int, seed: int = 0
) -> list[dict]:
    """`n_batches` collated micro-batches of `data.images_per_batch` images each."""
    prompt, caption = texts_for(processor.tokenizer, shape)
    fixed = shape.prompts_per_image
    # a fixed count is what every image gets: the cap follows it (the worst case sets it to the cap)
    cfg = data.model_copy(update={"max_prompts_per_image": fixed}) if fixed is not None else data
    collator = Collator(processor, cfg, lens_mode=lens_mode)
    return [
        collator.train_batch(synthetic_items(data.images_per_batch, cfg, prompt, caption, seed + b, fixed))
        for b in range(n_batches)
    ]


def vision_tokens(batch: dict, patch_size: int) -> int:
    """CLIP patch tokens of a micro-batch: tiles x (patches + CLS). Synthetic images are all the same
    size, so no tile of pixel_values [B, tiles, 3, H, W] is padding."""
    b, tiles, _, h, w = batch["pixel_values"].shape
    return b * tiles * ((h // patch_size) * (w // patch_size) + 1)


def patch_tokens(batch: dict, patch_size: int) -> int:
    """Patches without CLS: the patch convolution's outputs and (feature strategy "default") the
    projector's inputs."""
    b, tiles, _, h, w = batch["pixel_values"].shape
    return b * tiles * (h // patch_size) * (w // patch_size)
