"""Lens inventory and the special tokens the retriever adds to the tokenizer.

The order is the shared contract (`lenses_data.schemas.LENS_NAMES`, the one lens inventory):
index 0-4 = Literal, Figurative, Abstract, Background, Emotional. Slot lens tensors use these
indices and -1 for padding/inactive slots.
"""

from __future__ import annotations

from lenses_data.schemas import LENS_NAMES

NUM_LENSES = len(LENS_NAMES)
INACTIVE = -1  # slot lens label for padding or masked-out slots

PROMPT_TOKEN = "<PROMPT>"
# One tag per lens, same order as LENS_NAMES (the paper draws them as emoji; plain ASCII tags
# tokenise identically everywhere and are unambiguous in logs).
LENS_TOKENS: tuple[str, ...] = tuple(f"<{name.upper()}>" for name in LENS_NAMES)
NEW_TOKENS: tuple[str, ...] = (PROMPT_TOKEN, *LENS_TOKENS)

LENS_INDEX: dict[str, int] = {name: i for i, name in enumerate(LENS_NAMES)}


def lens_index(name: str) -> int:
    """Index 0-4 of a lens name; raises a clear error for anything else."""
    try:
        return LENS_INDEX[str(name)]
    except KeyError:
        raise ValueError(f"unknown lens {name!r}; expected one of {LENS_NAMES}") from None
