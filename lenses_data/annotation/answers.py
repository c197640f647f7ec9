"""Answer formats of the model stages (pydantic models; the JSON schemas sent are derived from them)
and their parse functions, which raise `AnswerError` with a specific code on a bad answer.

Listings 2-5 answer with a JSON array of items {"Prompt"|"Caption", "Focus", "Category"}. The
schema constrains Category to the five lenses and the array length; Focus and the text are left
free, so a single empty Focus or an over-long text is a per-item rule rejection later instead of
the loss of the whole answer.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from lenses_data.models.parsing import extract_json
from lenses_data.models.types import INVALID_CHOICE, AnswerError
from lenses_data.schemas import Lens

# Reason codes of bad answers (become Rejection.reason after the client's re-asks).
WRONG_SHAPE = "wrong_shape"
EMPTY_ARRAY = "empty_array"
TOO_MANY_ITEMS = "too_many_items"
COUNT_MISMATCH = "count_mismatch"
EXTRA_FIELD = "extra_field"
MISSING_FIELD = "missing_field"
INVALID_CATEGORY = "invalid_category"
WRONG_TYPE = "wrong_type"

TEXT_KEY = {"prompt": "Prompt", "caption": "Caption"}
FILTER_CHOICES = ["YES", "NO"]


_FOCUS = "The one object, region, relation or idea the text is about"
_CATEGORY = "The lens the text is written under"


class _Item(BaseModel):
    # Fields are declared per subclass so the text key comes first, as in the listings: under
    # constrained decoding the property order of the schema is the order the model writes.
    model_config = ConfigDict(extra="forbid", use_enum_values=True)


class PromptItem(_Item):
    """One image-side prompt (Listing 2 output; Listings 4-5 input and output)."""

    Prompt: str
    Focus: str = Field(description=_FOCUS)
    Category: Lens = Field(description=_CATEGORY)


class CaptionItem(_Item):
    """One caption (Listing 3 output; Listings 4-5 input and output)."""

    Caption: str
    Focus: str = Field(description=_FOCUS)
    Category: Lens = Field(description=_CATEGORY)


ITEM_MODELS: dict[str, type[_Item]] = {"prompt": PromptItem, "caption": CaptionItem}


@functools.cache
def _array_adapter(kind: str, min_items: int, max_items: int) -> TypeAdapter:
    # Built once per shape: a TypeAdapter costs ~1 ms, and every validator batch, each of its
    # parts and every answer parsed asks for one (hundreds of thousands at 100k candidates).
    item = ITEM_MODELS[kind]
    return TypeAdapter(Annotated[list[item], Field(min_length=min_items, max_length=max_items)])


@functools.cache
def _array_schema_json(kind: str, min_items: int, max_items: int) -> str:
    return json.dumps(_array_adapter(kind, min_items, max_items).json_schema())


def array_schema(kind: str, min_items: int, max_items: int) -> dict[str, Any]:
    """JSON schema of an answer: an array of `kind` items with a length range (a fresh copy)."""
    return json.loads(_array_schema_json(kind, min_items, max_items))


def _error_code(error: dict[str, Any]) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return EXTRA_FIELD
    if kind == "missing":
        return MISSING_FIELD
    if kind == "enum" or (len(error["loc"]) >= 1 and error["loc"][-1] == "Category"):
        return INVALID_CATEGORY
    return WRONG_TYPE


def parse_items(raw: str, kind: str, min_items: int, max_items: int) -> list[dict[str, str]]:
    """A JSON array of `kind` items -> list of plain dicts; AnswerError with a specific code."""
    data = extract_json(raw)
    if not isinstance(data, list):
        raise AnswerError(WRONG_SHAPE, f"expected a JSON array of items, got a JSON {type(data).__name__}")
    if not data and min_items > 0:
        raise AnswerError(EMPTY_ARRAY, "the answer is an empty array")
    if len(data) > max_items:
        code = COUNT_MISMATCH if min_items == max_items else TOO_MANY_ITEMS
        raise AnswerError(code, f"{len(data)} items; at most {max_items} allowed")
    if len(data) < min_items:
        raise AnswerError(COUNT_MISMATCH, f"{len(data)} items; expected {min_items}")
    if not all(isinstance(item, dict) for item in data):
        raise AnswerError(WRONG_SHAPE, "every array element must be a JSON object")
    try:
        items = _array_adapter(kind, 0, max_items).validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise AnswerError(_error_code(first), f"item {where}: {first['msg']}") from exc
    return [item.model_dump() for item in items]


def item_parser(kind: str, min_items: int, max_items: int) -> Callable[[str], list[dict[str, str]]]:
    def parse(raw: str) -> list[dict[str, str]]:
        return parse_items(raw, kind, min_items, max_items)

    return parse


def parse_filter_answer(raw: str) -> str:
    """Listing 1: exactly one word, YES or NO (case and a trailing period tolerated)."""
    word = (raw or "").strip().strip(".!\"'` \n").upper()
    if word not in FILTER_CHOICES:
        raise AnswerError(INVALID_CHOICE, f"expected YES or NO, got {(raw or '')[:60]!r}")
    return word


def items_json(kind: str, rows: Sequence[dict[str, Any]]) -> str:
    """The JSON array of items a validator receives (Listings 4-5 input), in row order."""
    key = TEXT_KEY[kind]
    items = [{key: r["text"], "Focus": r["focus"], "Category": str(r["lens"])} for r in rows]
    return json.dumps(items, ensure_ascii=False, indent=1)
