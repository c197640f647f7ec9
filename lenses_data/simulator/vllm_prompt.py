"""What an InternVL replica of vLLM reads from a chat request, and which of it its prefix cache holds.

vLLM renders a chat template of the "string" content format (InternVL's) by joining the text parts
of a turn with newlines and putting every image whose placeholder the text lacks at the FRONT of the
turn (vLLM 0.10.1.1, `entrypoints/chat_utils.py`, `_get_full_multimodal_text_prompt`, without
--interleave-mm-strings). Its prefix cache keys blocks of tokens by their content, a block holding
image tokens also by the image's hash (`v1/core/kv_cache_utils.py`), so two requests share the
blocks up to the first difference. The simulator uses both to report `cached_tokens` as vLLM does;
the tests use the rendering to check where the image lands.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

INTERNVL_PLACEHOLDER = "<image>"
BLOCK_TOKENS = 16  # vLLM's default KV block size
# About one H200 replica's KV cache for a 38B model: ~46 GB at 0.25 MiB a token is ~184k tokens.
REPLICA_CACHE_BLOCKS = 184_000 // BLOCK_TOKENS


def render_string_turn(content: str | list[dict[str, Any]], placeholder: str = INTERNVL_PLACEHOLDER) -> str:
    """A user turn as vLLM renders it for a "string"-format template (see the module docstring)."""
    if isinstance(content, str):
        return content
    text = "\n".join(part.get("text", "") for part in content if part.get("type") == "text")
    images = sum(part.get("type") == "image_url" for part in content)
    missing = max(0, images - text.count(placeholder))
    return "\n".join([placeholder] * missing + [text])


def _image_refs(content: str | list[dict[str, Any]]) -> list[str]:
    """One identity per image, stable within this process (the data URI's own str hash: cheap, and a
    simulator's cache lives in one process)."""
    if isinstance(content, str):
        return []
    refs = []
    for part in content:
        if part.get("type") == "image_url":
            url = part.get("image_url") or {}
            refs.append(str(url.get("sha256") or f"{hash(str(url.get('url', ''))):x}"))
    return refs


def prompt_units(body: dict[str, Any], placeholder: str = INTERNVL_PLACEHOLDER) -> list[str]:
    """The request's prompt as the simulator's tokens (whitespace words), each image placeholder
    replaced by one unit naming the image's content hash, in the order vLLM renders them."""
    units: list[str] = []
    for message in body.get("messages", []):
        content = message.get("content") or ""
        rendered = render_string_turn(content, placeholder)
        refs = iter(_image_refs(content))
        units.append(f"<|{message.get('role', 'user')}|>")
        for word in rendered.split():
            if word == placeholder:
                units.append(f"<image:{next(refs, '?')}>")
            else:
                units.append(word)
    return units


class PrefixCache:
    """Blocks of `BLOCK_TOKENS` units keyed by their content and everything before them, least
    recently used forgotten first: how many leading units of a prompt a replica has cached."""

    def __init__(self, max_blocks: int = REPLICA_CACHE_BLOCKS) -> None:
        self.max_blocks = max_blocks
        # Keys chain Python's tuple hash (64 bits, per process): this cache never leaves its process.
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def lookup_and_insert(self, units: list[str]) -> int:
        """Units of `units` served from the cache (whole blocks, at most all but the last unit,
        as vLLM computes at least one token); then the prompt's full blocks are cached."""
        key = 0
        hits, hitting = 0, True
        full = len(units) // BLOCK_TOKENS
        for index in range(full):
            key = hash((key, *units[index * BLOCK_TOKENS : (index + 1) * BLOCK_TOKENS]))
            if hitting and key in self._blocks:
                hits += BLOCK_TOKENS
                self._blocks.move_to_end(key)
                continue
            hitting = False
            self._blocks[key] = None
        while len(self._blocks) > self.max_blocks:
            self._blocks.popitem(last=False)
        return min(hits, max(0, len(units) - 1))
