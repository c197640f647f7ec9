"""Which image-side prompts go into an image input: density (supp. Table 5) and the token limit.

- `select_prompts` thins an image's prompt list for the prompt-density ablation: `all` keeps
  every prompt (z > 1, the paper's model), `top1` the first prompt of each lens (z = 1), `none`
  no prompt text (z = 0, token-only: "relying solely on learned lens tokens", supp. Sec. 4): one
  slot per lens of the image, whose query is that lens's learned token instead of a prompt
  (`<LITERAL><PROMPT>`; the collator writes it, `token_only_query`), so the image keeps the lens
  slots of z = 1 and only the prompt text is gone. Prompts arrive ordered by lens then text id,
  so "first" is the lowest text id of the lens: the export has no prompt score to rank by.
- `fit_to_token_limit` enforces the supplementary's "maximum sequence length of 3,500 tokens"
  for image inputs (Sec. 7) by truncation, as the paper truncates captions: the image input is
  cut at the end, but only at a prompt boundary, so every kept `<PROMPT>` slot keeps its whole
  prompt and the lens label list stays aligned with the slots; EOS is kept. An input whose
  image alone is longer than the limit cannot be truncated (the image features are one block)
  and is an error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from training.retriever.lenses import LENS_TOKENS

PromptDensity = Literal["all", "top1", "none"]
Prompt = tuple[str, int]  # (text, lens index)
TOKEN_ONLY = ""  # text of a z = 0 slot: the collator puts the lens token in its place


def token_only_query(lens: int) -> str:
    """The query of a z = 0 slot of `lens`: its learned lens token (the `<PROMPT>` follows it)."""
    return LENS_TOKENS[lens]


def _first_per_lens(prompts: list[Prompt]) -> list[Prompt]:
    seen: set[int] = set()
    out = []
    for text, lens in prompts:
        if lens not in seen:
            seen.add(lens)
            out.append((text, lens))
    return out


def select_prompts(prompts: list[Prompt], density: PromptDensity) -> list[Prompt]:
    """The prompts of one image kept under `density` (order preserved)."""
    if density == "all":
        return list(prompts)
    if density == "none":
        return [(TOKEN_ONLY, lens) for _, lens in _first_per_lens(prompts)]
    if density == "top1":
        return _first_per_lens(prompts)
    raise ValueError(f"unknown prompt density {density!r}; expected all, top1 or none")


def fit_to_token_limit(
    prompts: list[Prompt],
    image_tokens: int,
    length_of: Callable[[list[Prompt]], int],
    limit: int,
) -> list[Prompt]:
    """The longest prefix of `prompts` whose image input fits in `limit` tokens.

    image_tokens: tokens the processor adds for the image beyond its one placeholder token;
    length_of(prompts): token count of the input text with those prompts (placeholder not
    expanded). Raises ValueError when even the prompt-free input is too long.
    """
    for keep in range(len(prompts), -1, -1):
        total = length_of(prompts[:keep]) + image_tokens
        if total <= limit:
            return prompts[:keep]
    raise ValueError(
        f"image input without any prompt has {total} tokens, over max_image_tokens={limit}; "
        "raise the limit or lower data.image_size (the image features cannot be truncated)"
    )
