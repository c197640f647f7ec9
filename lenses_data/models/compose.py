"""An answer composed from earlier answers, part by part, instead of one new call.

A request asked in parts (`ModelRequest.parts`: a validator's batch, the texts of one image and
kind) is a set of independent items: Listings 4 and 5 judge and edit each item on its own, and the
answer is an array with one element per item. When such a request was not answered before as a
whole (its batch changed: a rule now rejects one of its texts, a text was added), each part may
still have been answered: asked alone, or as one element of an earlier batch. If every part has an
answer in the earlier runs' journals (`reuse.AnswerIndex.get_part`: the same served model, prompt,
sampling and seed, image and item, keyed by the part's own request hash), the answer is composed
from those elements and nothing is sent. One part without an earlier answer and the request goes
out whole, as built: a batch is never split to save calls, so a fresh build's batching is kept.

The composed answer goes through the stage's parser and its alignment checks like any answer (an
element taken from an answer whose items came back reordered fails them, and the stage re-asks
item by item), and it is journaled under the request's own hash with its parts and first source,
so a rerun replays it and a later run may compose from it in turn.

What this trades: a model answers an item with its batch-mates in the context, so the same item in
another batch could be answered differently (as could the same batch with another seed). The
listings ask for each item on its own; the project takes an earlier judgement of the very item as
that judgement (docs/architecture.md, "Regenerating after a change").
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from lenses_data.models.journal import JournalEntry
from lenses_data.models.parsing import extract_json
from lenses_data.models.reuse import AnswerIndex
from lenses_data.models.types import AnswerError


def composed_entry(
    index: AnswerIndex, request_hash: str, part_hashes: Sequence[str], served: str | None
) -> JournalEntry | None:
    """A journal entry answering the whole request from its parts' earlier answers; None when a
    part has none (or its earlier answer no longer holds that element)."""
    elements, sources = [], []
    for part_hash in part_hashes:
        found = index.get_part(part_hash, served)
        element = _element(*found) if found is not None else None
        if element is None:
            return None
        elements.append(element)
        sources.append(found[0])
    first = sources[0]
    return JournalEntry(
        hash=request_hash,
        key=first.key,
        role=first.role,
        model=first.model,
        status="ok",
        raw=json.dumps(elements, ensure_ascii=False),
        attempts=0,
        simulated=any(source.simulated for source in sources),
        served=served,
        source_run=first.source_run,
        source_file=first.source_file,
        parts=list(part_hashes),
    )


def _element(entry: JournalEntry, position: int) -> object | None:
    """Element `position` of an answer's JSON array (the raw text, fences and prose tolerated)."""
    try:
        value = extract_json(entry.raw)
    except AnswerError:
        return None
    if not isinstance(value, list) or position >= len(value):
        return None
    return value[position]
