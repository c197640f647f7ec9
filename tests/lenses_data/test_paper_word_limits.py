"""The word limits against the paper's 59 published texts (supplementary Figs. 5 and 7).

Listing 2 asks for prompts of 10-28 words, Listing 3 for captions of 8-22. Two published Fig. 5
captions of the knight-in-the-elevator image are outside: the Literal one has 24 words, the Abstract
one ("Epochs collide: ...") 7. The paper kept them, so the default (`annotate.word_limits: flag`)
keeps every published text and records the two in their `flags`; `reject` rejects exactly those
two with their reason. The rules stage runs here on the texts as the generator would have returned
them, one image per published figure row.
"""

from __future__ import annotations

import pandas as pd
import pytest

from lenses_data.annotation import rules
from lenses_data.config import PipelineConfig
from lenses_data.stages.rules import RulesStage
from tests.lenses_data.paper_texts import paper_examples
from tests.lenses_data.stages.annotate_rows import frame, lens_row

# (kind, lens, words, reason) of the two published texts outside their listing's range.
OUTSIDE = [
    ("caption", "Abstract", 7, rules.WORD_COUNT_LOW),
    ("caption", "Literal", 24, rules.WORD_COUNT_HIGH),
]


@pytest.fixture(scope="module")
def published() -> pd.DataFrame:
    rows = []
    for kind, figure_rows in paper_examples().items():
        for index, items in enumerate(figure_rows):
            for lens, text in items:
                # The figures print no Focus; the text's first three words stand in for it.
                focus = " ".join(text.split()[:3])
                rows.append(lens_row(f"{kind}-{index}", kind, lens, text, focus=focus))
    assert len(rows) == 59
    return frame(rows)


def _word_count(text: str) -> int:
    return len(rules.words(text))


def test_default_keeps_all_59_and_flags_the_two_outside_the_ranges(published):
    kept, rejected = RulesStage(PipelineConfig()).annotate_frame(published)
    assert rejected.empty
    assert sorted(kept["text_id"]) == sorted(published["text_id"])
    # Kept verbatim: flagging never edits a text.
    assert dict(zip(kept["text_id"], kept["text"], strict=True)) == dict(
        zip(published["text_id"], published["text"], strict=True)
    )
    word_flags = kept["flags"].map(lambda f: [c for c in f if c in rules.WORD_LIMITS])
    flagged = kept[word_flags.str.len() > 0]
    found = [
        (kind, str(lens), _word_count(text), reason)
        for kind, lens, text, (reason,) in zip(
            flagged["kind"], flagged["lens"], flagged["text"], word_flags[flagged.index], strict=True
        )
    ]
    assert sorted(found) == OUTSIDE


def test_reject_mode_rejects_exactly_the_two_with_their_reason(published):
    config = PipelineConfig.model_validate({"annotate": {"word_limits": "reject"}})
    kept, rejected = RulesStage(config).annotate_frame(published)
    assert len(kept) == 57 and len(rejected) == 2
    assert not kept["flags"].map(lambda f: bool(set(f) & rules.WORD_LIMITS)).any()
    by_id = published.set_index("text_id")
    found = sorted(
        (by_id.at[r, "kind"], str(by_id.at[r, "lens"]), _word_count(by_id.at[r, "text"]), reason)
        for r, reason in zip(rejected["record_id"], rejected["reason"], strict=True)
    )
    assert found == OUTSIDE
    assert sorted(rejected["message"]) == ["24 words; at most 22 allowed", "7 words; at least 8 required"]
    assert set(rejected["stage"]) == {"rules"}
