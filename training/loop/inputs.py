"""Input formatting and tokenisation (Eqs. 1-3) shared by training and encoding.

Exact strings (lens mode; `</s>` is the tokenizer's EOS, BOS is added by the tokenizer):
  image:   f"{instruct}{image_task} <image> {p_1}<PROMPT> {p_2}<PROMPT> ... {p_Z}<PROMPT></s>"
  caption: f"{instruct}{caption_task} {t} <LITERAL><FIGURATIVE><ABSTRACT><BACKGROUND><EMOTIONAL></s>"
Token-only images (`data.prompt_density: none`, z = 0) put each slot's lens token in place of
its prompt: f"... <image> <LITERAL><PROMPT> <EMOTIONAL><PROMPT></s>" (training.loop.prompts).
Global-only baseline mode drops the prompts and the lens tags:
  image:   f"{instruct}{image_task} <image></s>"      caption: f"{instruct}{caption_task} {t}</s>"
"""

from __future__ import annotations

import logging

import torch

from training.loop.prompts import fit_to_token_limit, select_prompts, token_only_query
from training.retriever.config import DataConfig
from training.retriever.lenses import INACTIVE, LENS_TOKENS, NEW_TOKENS, PROMPT_TOKEN

log = logging.getLogger(__name__)


class Collator:
    """Turns (index, PIL image, prompts, captions) items into model-ready tensors."""

    def __init__(self, processor, cfg: DataConfig, lens_mode: bool = True):
        self.processor = processor
        self.tok = processor.tokenizer
        self.cfg = cfg
        self.lens_mode = lens_mode
        self.prefix_img = f"{cfg.instruct_marker}{cfg.image_task} {self.processor.image_token}"
        self.prefix_txt = f"{cfg.instruct_marker}{cfg.caption_task} "
        # tail kept intact by caption truncation: the five lens tags and EOS (or just EOS)
        self.tail = len(LENS_TOKENS) + 1 if lens_mode else 1
        specials = (self.tok.bos_token, self.tok.eos_token, self.tok.pad_token, self.tok.unk_token)
        reserved = {t for t in (*specials, processor.image_token, *NEW_TOKENS) if t}
        self.reserved = sorted(reserved, key=len, reverse=True)

    def clean(self, text: str) -> str:
        """Defuse special-token strings inside data text ("</s>" -> "< /s>"): a caption must not
        inject an EOS, an image placeholder or a slot token. Callers count changed texts."""
        for token in self.reserved:
            if token in text:
                text = text.replace(token, f"{token[0]} {token[1:]}")
        return text

    # ---- strings -------------------------------------------------------------------------
    def image_text(self, prompts: list[str]) -> str:
        if not self.lens_mode:
            return f"{self.prefix_img}{self.tok.eos_token}"
        queries = " ".join(f"{p}{PROMPT_TOKEN}" for p in prompts)
        return (
            f"{self.prefix_img} {queries}{self.tok.eos_token}"
            if queries
            else f"{self.prefix_img}{self.tok.eos_token}"
        )

    def slot_queries(self, prompts: list[tuple[str, int]]) -> list[str]:
        """The query text before each `<PROMPT>`: the cleaned prompt, or (z = 0) the lens token."""
        if self.lens_mode and self.cfg.prompt_density == "none":
            return [token_only_query(c) for _, c in prompts]
        return [self.clean(t) for t, _ in prompts]

    def caption_text(self, text: str) -> str:
        tags = " " + "".join(LENS_TOKENS) if self.lens_mode else ""
        return f"{self.prefix_txt}{text}{tags}{self.tok.eos_token}"

    # ---- tensors -------------------------------------------------------------------------
    def images(self, pil_images: list, prompt_lists: list[list[tuple[str, int]]]) -> dict:
        """Processor output plus img_slot_lens [B, S] (lens per <PROMPT>, -1 padding).

        Prompts are thinned by `data.prompt_density`, capped at `max_prompts_per_image`, and
        inputs over `max_image_tokens` are truncated at a prompt boundary (training.loop.prompts).
        """
        cap = self.cfg.max_prompts_per_image
        if self.lens_mode:
            prompt_lists = [select_prompts(p, self.cfg.prompt_density) for p in prompt_lists]
        dropped = sum(max(0, len(p) - cap) for p in prompt_lists) if self.lens_mode else 0
        prompt_lists = [p[:cap] for p in prompt_lists] if self.lens_mode else [[] for _ in prompt_lists]
        if dropped:
            log.warning(
                "%d image-side prompts beyond max_prompts_per_image=%d left out of this batch", dropped, cap
            )
        raw = [t for p in prompt_lists for t, _ in p]
        sanitized = sum(self.clean(t) != t for t in raw)
        enc = self._encode_images(pil_images, prompt_lists)
        prompt_lists, too_long, over = self._fit(pil_images, prompt_lists, enc)
        if too_long:
            enc = self._encode_images(pil_images, prompt_lists)
            log.warning(
                "%d image inputs over max_image_tokens=%d: %d trailing prompts truncated",
                too_long, self.cfg.max_image_tokens, over,
            )  # fmt: skip
        n_slots = max((len(p) for p in prompt_lists), default=0)
        lens = torch.full((len(prompt_lists), n_slots), INACTIVE, dtype=torch.long)
        for row, prompts in enumerate(prompt_lists):
            lens[row, : len(prompts)] = torch.tensor([c for _, c in prompts], dtype=torch.long)
        return {
            "img_input_ids": enc["input_ids"],
            "img_attention_mask": enc["attention_mask"],
            "pixel_values": enc["pixel_values"],
            "image_sizes": enc["image_sizes"],
            "img_slot_lens": lens,
            "n_prompts_dropped": dropped,
            "n_images_too_long": too_long,
            "n_prompts_over_token_limit": over,
            "n_texts_sanitized": sanitized,
        }

    def _encode_images(self, pil_images: list, prompt_lists: list[list[tuple[str, int]]]):
        texts = [self.image_text(self.slot_queries(p)) for p in prompt_lists]
        return self.processor(text=texts, images=pil_images, return_tensors="pt", padding=True)

    def _text_tokens(self, prompts: list[tuple[str, int]]) -> int:
        text = self.image_text(self.slot_queries(prompts))
        return len(self.tok(text, add_special_tokens=True)["input_ids"])

    def _fit(self, pil_images: list, prompt_lists: list, enc) -> tuple[list, int, int]:
        """Prompt lists truncated so every input fits max_image_tokens; (lists, rows cut, prompts cut)."""
        limit = self.cfg.max_image_tokens
        lengths = enc["attention_mask"].sum(dim=1).tolist()
        out, rows, cut = list(prompt_lists), 0, 0
        for row, length in enumerate(lengths):
            if length <= limit:
                continue
            # the processor's expansion of the one <image> placeholder into image features
            image_tokens = int(length) - self._text_tokens(prompt_lists[row])
            out[row] = fit_to_token_limit(prompt_lists[row], image_tokens, self._text_tokens, limit)
            rows, cut = rows + 1, cut + len(prompt_lists[row]) - len(out[row])
        return out, rows, cut

    def captions(self, texts: list[str]) -> dict:
        """Caption inputs truncated to max_caption_tokens, always keeping the lens tags and EOS."""
        limit = self.cfg.max_caption_tokens
        cleaned = [self.clean(t) for t in texts]
        sanitized = sum(c != t for c, t in zip(cleaned, texts, strict=True))
        ids = self.tok([self.caption_text(t) for t in cleaned], add_special_tokens=True)["input_ids"]
        truncated = 0
        for i, row in enumerate(ids):
            if len(row) > limit:
                ids[i] = row[: limit - self.tail] + row[-self.tail :]
                truncated += 1
        width = max(len(r) for r in ids)
        pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.tok.eos_token_id
        input_ids = torch.full((len(ids), width), pad, dtype=torch.long)
        mask = torch.zeros((len(ids), width), dtype=torch.long)
        for i, row in enumerate(ids):
            input_ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, : len(row)] = 1
        return {
            "txt_input_ids": input_ids,
            "txt_attention_mask": mask,
            "n_captions_truncated": truncated,
            "n_texts_sanitized": sanitized,
        }

    def train_batch(self, items: list[tuple[int, object, list, list]]) -> dict:
        """items: (image index, PIL image, prompts [(text, lens)], captions [(text, lens)])."""
        batch = self.images([im for _, im, _, _ in items], [p for _, _, p, _ in items])
        caps = [(idx, text, lens) for idx, _, _, cs in items for text, lens in cs]
        sanitized_prompts = batch["n_texts_sanitized"]
        batch.update(self.captions([t for _, t, _ in caps]))
        batch["n_texts_sanitized"] += sanitized_prompts
        batch["img_ids"] = torch.tensor([idx for idx, _, _, _ in items], dtype=torch.long)
        batch["txt_img_ids"] = torch.tensor([idx for idx, _, _ in caps], dtype=torch.long)
        batch["txt_lens"] = torch.tensor([lens for _, _, lens in caps], dtype=torch.long)
        return batch


def to_device(batch: dict, device: torch.device) -> dict:
    return {
        k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()
    }
