"""The lens-slot retriever around a LLaVA-Next model (paper Sec. 3.2).

Image input  (Eq. 1): `<instruct>{task} <image> p_1<PROMPT> p_2<PROMPT> ... p_Z<PROMPT></s>`
Caption input (Eq. 2): `<instruct>{task} {caption} <LITERAL><FIGURATIVE><ABSTRACT><BACKGROUND><EMOTIONAL></s>`
(both after the tokenizer's BOS). Slots are the final hidden states at the `<PROMPT>` /
lens-token positions, located in the input ids *after* the processor has expanded `<image>` into
its image-feature tokens, so positions index the language model's sequence directly. The global
embedding is the final hidden state of the last real token (the appended EOS), found from the
attention mask, so any padding side works.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from training.retriever.config import LossConfig
from training.retriever.lenses import INACTIVE, NEW_TOKENS, NUM_LENSES
from training.retriever.losses import (
    caption_slot_loss,
    positive_mask,
    retrieval_losses,
    slot_diversity_loss,
    slot_loss_pairs,
    total_loss,
)
from training.retriever.similarity import global_similarity, lens_similarity_with_details


@dataclass(frozen=True)
class TokenIds:
    prompt: int
    lens: tuple[int, ...]
    eos: int
    pad: int

    @property
    def new(self) -> list[int]:
        return [self.prompt, *self.lens]


@dataclass
class Embeddings:
    """slots [n, S, d] float32, slot_lens [n, S] long (0-4 or -1), global_ [n, d] float32."""

    slots: torch.Tensor
    slot_lens: torch.Tensor
    global_: torch.Tensor


def add_lens_tokens(tokenizer, model, sigma: float = 0.1, seed: int = 0) -> TokenIds:
    """Add `<PROMPT>` and the five lens tokens; init rows = EOS embedding + N(0, (sigma/sqrt(d))^2).

    "sigma 0.1 scaled by feature dimension" is read as a per-coordinate std of sigma/sqrt(d), so
    the noise vector has an expected L2 norm of about sigma whatever the hidden size. The same
    vectors are mirrored into the output embedding (lm_head) rows when it is not tied.
    """
    tokenizer.add_tokens(list(NEW_TOKENS), special_tokens=True)
    new_ids = tokenizer.convert_tokens_to_ids(list(NEW_TOKENS))
    emb = model.get_input_embeddings()
    if emb.weight.shape[0] <= max(new_ids):  # checkpoints often pad the vocab; only grow if needed
        model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
        emb = model.get_input_embeddings()
    eos = tokenizer.eos_token_id
    d = emb.weight.shape[1]
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        base = emb.weight[eos].detach().float().cpu()
        init = base + torch.randn(len(new_ids), d, generator=gen) * (sigma / math.sqrt(d))
        emb.weight[new_ids] = init.to(emb.weight)
        out = model.get_output_embeddings()
        if (
            out is not None
            and out.weight.data_ptr() != emb.weight.data_ptr()
            and out.weight.shape[0] > max(new_ids)
        ):
            out.weight[new_ids] = init.to(out.weight)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    return TokenIds(prompt=new_ids[0], lens=tuple(new_ids[1:]), eos=eos, pad=pad)


def last_token_states(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """hidden [B, L, d], attention_mask [B, L] -> [B, d] at each row's last real token."""
    mask = attention_mask.bool()
    if not bool(mask.any(dim=1).all()):
        raise ValueError("a sequence has no real token")
    length = mask.shape[1]
    last = length - 1 - mask.flip(dims=[1]).long().argmax(dim=1)  # [B]
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


def token_states(
    hidden: torch.Tensor, input_ids: torch.Tensor, token_id: int, n_slots: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hidden states at the first `n_slots` occurrences of `token_id` per row, in order.

    Returns states [B, n_slots, d] (zeros where a row has fewer) and counts [B].
    """
    b, length, d = hidden.shape
    is_tok = input_ids == token_id
    arange = torch.arange(length, device=input_ids.device).expand(b, length)
    pos = (
        torch.where(is_tok, arange, torch.full_like(arange, length)).sort(dim=1).values[:, :n_slots]
    )  # [B, n]
    valid = pos < length
    states = hidden.gather(1, pos.clamp(max=length - 1)[..., None].expand(-1, -1, d))
    return states * valid[..., None].to(states.dtype), is_tok.sum(dim=1)


def caption_slot_lens(lens_labels: torch.Tensor | None, n: int, device) -> torch.Tensor:
    """[n, 5]: training = only the labelled lens active; inference (labels None) = all five."""
    all_lenses = torch.arange(NUM_LENSES, device=device).expand(n, NUM_LENSES)
    if lens_labels is None:
        return all_lenses.clone()
    return torch.where(all_lenses == lens_labels[:, None], all_lenses, torch.full_like(all_lenses, INACTIVE))


def identity_gather(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return tensors


class LensRetriever(nn.Module):
    """Wraps a (peft-wrapped) LlavaNextForConditionalGeneration; forward returns named losses."""

    def __init__(self, net: nn.Module, ids: TokenIds, loss: LossConfig, gather: Callable = identity_gather):
        super().__init__()
        self.net = net
        self.ids = ids
        self.loss_cfg = loss
        self.gather = gather  # cross-rank gather of embeddings (training.loop.dist), identity on one process
        self.compute_dtype = torch.float32  # bf16: backbone runs under autocast (frozen bf16, trainable fp32)
        self.length_chunks = 1  # speed.length_chunks: sub-batches per encoder forward

    @property
    def lens_mode(self) -> bool:
        return self.loss_cfg.mode == "lens"

    def _backbone(self) -> nn.Module:
        # LlavaNextModel (no lm_head): logits over the vocabulary are never needed for retrieval.
        net = self.net.get_base_model() if type(self.net).__name__.startswith("Peft") else self.net
        return net.model

    def _hidden(self, **inputs) -> torch.Tensor:
        device_type = inputs["input_ids"].device.type
        with torch.autocast(device_type, dtype=torch.bfloat16, enabled=self.compute_dtype == torch.bfloat16):
            return self._backbone()(**inputs, use_cache=False).last_hidden_state

    def encode_images(self, input_ids, attention_mask, pixel_values, image_sizes, slot_lens) -> Embeddings:
        """slot_lens [B, S]: lens of each `<PROMPT>` in order, -1 padding after the active ones."""
        return self._in_length_chunks(
            self._encode_image_rows, attention_mask, input_ids, pixel_values, image_sizes, slot_lens
        )

    def encode_captions(
        self, input_ids, attention_mask, lens_labels: torch.Tensor | None = None
    ) -> Embeddings:
        return self._in_length_chunks(self._encode_caption_rows, attention_mask, input_ids, lens_labels)

    def _in_length_chunks(self, encode: Callable, attention_mask, input_ids, *row_args) -> Embeddings:
        """`encode(input_ids, attention_mask, *row_args)` over length-sorted sub-batches.

        speed.length_chunks > 1: rows are sorted by length and split; each sub-batch is cut to its
        longest row when the padding is on the right (a causal model's real tokens never see
        right padding, so their states do not change). Results return in the input order.
        """
        if self.length_chunks <= 1 or input_ids.shape[0] <= 1:
            return encode(input_ids, attention_mask, *row_args)
        lengths = attention_mask.sum(dim=1)
        order = lengths.argsort(descending=True, stable=True)
        parts = []
        for rows in order.chunk(self.length_chunks):
            mask = attention_mask[rows]
            width = int(lengths[rows].max())
            if bool(mask[:, width:].any()):  # not right-padded: keep the full width
                width = mask.shape[1]
            args = [a[rows] if isinstance(a, torch.Tensor) else a for a in row_args]
            parts.append(encode(input_ids[rows, :width], mask[:, :width], *args))
        restore = order.argsort()
        return Embeddings(
            torch.cat([p.slots for p in parts])[restore],
            torch.cat([p.slot_lens for p in parts])[restore],
            torch.cat([p.global_ for p in parts])[restore],
        )

    def _encode_image_rows(
        self, input_ids, attention_mask, pixel_values, image_sizes, slot_lens
    ) -> Embeddings:
        hidden = self._hidden(
            input_ids=input_ids,
            attention_mask=attention_mask,
            pixel_values=pixel_values,
            image_sizes=image_sizes,
        )
        slots, counts = token_states(hidden, input_ids, self.ids.prompt, slot_lens.shape[1])
        if not torch.equal(counts, (slot_lens >= 0).sum(dim=1)):
            raise ValueError(
                f"<PROMPT> count {counts.tolist()} does not match slot labels {slot_lens.tolist()}"
            )
        return Embeddings(slots.float(), slot_lens, last_token_states(hidden, attention_mask).float())

    def _encode_caption_rows(self, input_ids, attention_mask, lens_labels) -> Embeddings:
        hidden = self._hidden(input_ids=input_ids, attention_mask=attention_mask)
        n = input_ids.shape[0]
        if not self.lens_mode:
            empty = hidden.new_zeros(n, 0, hidden.shape[-1]).float()
            return Embeddings(
                empty,
                torch.zeros(n, 0, dtype=torch.long, device=hidden.device),
                last_token_states(hidden, attention_mask).float(),
            )
        per_lens = []
        for token_id in self.ids.lens:
            states, counts = token_states(hidden, input_ids, token_id, 1)
            if not bool((counts == 1).all()):
                raise ValueError("every caption input must contain each lens token exactly once")
            per_lens.append(states)
        slots = torch.cat(per_lens, dim=1).float()  # [n, 5, d]
        return Embeddings(
            slots,
            caption_slot_lens(lens_labels, n, hidden.device),
            last_token_states(hidden, attention_mask).float(),
        )

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        img = self.encode_images(
            batch["img_input_ids"],
            batch["img_attention_mask"],
            batch["pixel_values"],
            batch["image_sizes"],
            batch["img_slot_lens"],
        )
        txt = self.encode_captions(batch["txt_input_ids"], batch["txt_attention_mask"], batch["txt_lens"])
        return self.losses(img, txt, batch["img_ids"], batch["txt_img_ids"])

    def losses(
        self, img: Embeddings, txt: Embeddings, img_ids: torch.Tensor, txt_img_ids: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        g = self.gather(
            {
                "img_slots": img.slots, "img_slot_lens": img.slot_lens, "img_global": img.global_, "img_ids": img_ids,
                "txt_slots": txt.slots, "txt_slot_lens": txt.slot_lens, "txt_global": txt.global_, "txt_img_ids": txt_img_ids,
            }
        )  # fmt: skip
        c = self.loss_cfg
        if not self.lens_mode:
            scores = global_similarity(g["img_global"], g["txt_global"])
            i2t, t2i = retrieval_losses(scores, g["img_ids"], g["txt_img_ids"], c.tau)
            return {"total": i2t + t2i, "ret": i2t + t2i, "i2t": i2t, "t2i": t2i}
        details = lens_similarity_with_details(
            g["img_slots"], g["img_slot_lens"], g["img_global"], g["txt_slots"], g["txt_slot_lens"], g["txt_global"],
            alpha=c.alpha, denominator=c.denominator, fallback=c.fallback,
        )  # fmt: skip
        i2t, t2i = retrieval_losses(details.scores, g["img_ids"], g["txt_img_ids"], c.tau)
        pos = positive_mask(g["img_ids"], g["txt_img_ids"])
        pairs = slot_loss_pairs(g["img_ids"], g["txt_img_ids"], c.slot_pairs)
        slot = caption_slot_loss(
            g["img_slots"], g["img_slot_lens"], g["txt_slots"], g["txt_slot_lens"], pairs, c.tau_s
        )
        div = slot_diversity_loss(g["img_slots"], g["img_slot_lens"], c.div_margin)
        ret = i2t + t2i
        return {
            "total": total_loss(ret, slot, div, c.lambda_slot, c.lambda_div),
            "ret": ret,
            "i2t": i2t,
            "t2i": t2i,
            "slot": slot,
            "div": div,
            "fallback_rate": details.used_fallback[pos].float().mean().detach()
            if bool(pos.any())
            else pos.new_zeros(()).float(),
        }
