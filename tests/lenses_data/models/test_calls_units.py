"""The pure parts of one request's life, pinned whole: reading a completion's JSON, parsing its
choices into values or coded failures, finding a choice in free text, and replaying the journal."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest
from PIL import Image

from lenses_data.models import types as codes
from lenses_data.models.calls import (
    Completion,
    RoleRuntime,
    _failed,
    _image,
    _journal,
    _tolerant,
    run_one,
)
from lenses_data.models.journal import JournalEntry, ShardJournal, shard_journal_path
from lenses_data.models.journaled import parse_all, replay
from lenses_data.models.messages import load_image
from lenses_data.models.types import AnswerError, ModelRequest, ModelResult
from lenses_data.simulator.testing import sim_models_config


def _completion(**payload: object) -> Completion:
    return Completion.from_json(json.dumps(payload).encode(), "fallback/model")


def test_completion_keeps_counted_usage_and_cached_tokens_and_drops_the_rest() -> None:
    usage = {
        "prompt_tokens": 40,
        "completion_tokens": 2,
        "total_tokens": "42",  # a listed field that is not a count is dropped
        "reasoning_tokens": 7,  # a count the client does not use is dropped
        "prompt_tokens_details": {"cached_tokens": 32},
    }
    choices = [
        {"message": {"content": "YES"}, "finish_reason": "stop"},
        {"message": None, "finish_reason": "length"},
    ]
    got = _completion(model="org/real", choices=choices, usage=usage)
    expected = Completion(
        model="org/real",
        contents=["YES", None],
        finishes=["stop", "length"],
        usage={"prompt_tokens": 40, "completion_tokens": 2, "cached_tokens": 32},
        simulated=False,
    )
    assert got == expected
    assert _completion(choices=[], usage=None) == Completion("fallback/model", [], [], {}, False)


def test_completion_is_simulated_by_fingerprint_or_by_model_name_alone() -> None:
    by_fingerprint = _completion(model="org/real", system_fingerprint=codes.SIMULATOR_FINGERPRINT)
    by_name = _completion(model=codes.SIMULATED_MODEL_PREFIX + "x", system_fingerprint="fp_real")
    neither = _completion(model="org/real", system_fingerprint="fp_real")
    assert (by_fingerprint.simulated, by_name.simulated, neither.simulated) == (True, True, False)


def test_completion_that_is_not_an_object_is_refused_by_name() -> None:
    with pytest.raises(ValueError) as caught:
        Completion.from_json(b"[1, 2]", "m")
    assert str(caught.value) == "completion is not a JSON object"


def _answer_error(contents: list[str | None], parse=str.strip, n: int = 1) -> tuple[str, str]:
    with pytest.raises(AnswerError) as caught:
        parse_all(contents, [None] * len(contents), parse, n)
    return caught.value.code, caught.value.message


def _fails(text: str) -> None:
    raise ValueError(text)


def test_parse_all_names_each_bad_answer_with_its_code_and_whole_message() -> None:
    assert _answer_error(["YES"], n=2) == (codes.EMPTY_ANSWER, "expected 2 choice(s), got 1")
    assert _answer_error([None]) == (codes.EMPTY_ANSWER, "the model returned no content")
    assert _answer_error([" \n"]) == (codes.EMPTY_ANSWER, "the model returned no content")
    assert _answer_error(["nope"], _fails) == (codes.SCHEMA_INVALID, "ValueError: nope")
    long = "x" * 400  # the parser's message is cut to 300 characters
    assert _answer_error([long], _fails) == (codes.SCHEMA_INVALID, "ValueError: " + "x" * 300)
    assert parse_all([" a ", "b"], ["stop", "stop"], str.strip, 2) == ["a", "b"]


def _runtime(
    tmp_path: Path, tolerant: bool = False, style: str = "structured_outputs", **fields
) -> RoleRuntime:
    config = sim_models_config(["http://127.0.0.1:9/v1"])
    return RoleRuntime(
        "filter",
        config.filter,
        pool=None,
        choice_style=style,
        retry=config.retry,
        journal=ShardJournal(shard_journal_path(tmp_path, "filter", 0)),
        reuse_failed=fields.pop("reuse_failed", False),
        rng=random.Random(0),
        tolerant_choice=tolerant,
        **fields,
    )


@pytest.mark.parametrize(
    ("choice", "tolerant", "style", "seen"),
    [
        (["YES", "NO"], False, "structured_outputs", "I would say yes."),  # the server constrains
        (["YES", "NO"], True, "structured_outputs", "YES"),  # the probe found it ignores the constraint
        (["YES", "NO"], False, "none", "YES"),  # no constraint on the wire
        (["YES", "NO"], True, "none", "YES"),
        (None, True, "none", "I would say yes."),  # not a choice request
    ],
)
def test_tolerant_parser_sees_the_named_choice_only_without_a_constraint(
    tmp_path: Path, choice: list[str] | None, tolerant: bool, style: str, seen: str
) -> None:
    request = ModelRequest(key="k", role="filter", text="?", choice=choice)
    parse = _tolerant(_runtime(tmp_path, tolerant, style), request, lambda text: ("parsed", text))
    assert parse("I would say yes.") == ("parsed", seen)


def _journaled(tmp_path: Path, status: str, raw: str | None, **fields) -> RoleRuntime:
    rt = _runtime(tmp_path, reuse_failed=True)
    rt.journal.put(
        JournalEntry(
            hash="h",
            key="old-key",
            role="filter",
            model="org/m",
            status=status,
            raw=raw,
            attempts=3,
            usage={"prompt_tokens": 5},
            **fields,
        )
    )
    return rt


def _replayed(**fields) -> ModelResult:
    common = dict(
        key="k", attempts=3, model="org/m", usage={"prompt_tokens": 5}, cached=True, request_hash="h"
    )
    return ModelResult(**{**common, **fields})


def test_replay_gives_back_the_journaled_answer_whole(tmp_path: Path) -> None:
    one = ModelRequest(key="k", role="filter", text="?")
    two = ModelRequest(key="k", role="filter", text="?", n=2)
    rt = _journaled(tmp_path, "ok", " a ")
    assert replay(rt, one, str.strip, "h") == _replayed(ok=True, value="a", raw=" a ")
    rt = _journaled(tmp_path / "n2", "ok", json.dumps([" a ", "b"]))
    expected = _replayed(ok=True, value=["a", "b"], raw='[" a ", "b"]')
    assert replay(rt, two, str.strip, "h") == expected
    assert replay(_journaled(tmp_path / "none", "ok", None), two, str.strip, "h") is None  # ask again


def test_replay_gives_back_a_journaled_failure_whole(tmp_path: Path) -> None:
    request = ModelRequest(key="k", role="filter", text="?")
    rt = _journaled(tmp_path, "failed", "MAYBE", error_code=codes.INVALID_CHOICE, error_message="why")
    expected = _replayed(ok=False, raw="MAYBE", error_code=codes.INVALID_CHOICE, error_message="why")
    assert replay(rt, request, str.strip, "h") == expected


def test_failure_record_keeps_the_reason_and_the_model() -> None:
    request = ModelRequest(key="k", role="filter", text="?")
    expected = ModelResult(key="k", ok=False, error_code=codes.BAD_INPUT, error_message="why", model="org/m")
    assert _failed(request, "org/m", codes.BAD_INPUT, "why") == expected


def test_journal_writes_the_result_whole(tmp_path: Path) -> None:
    written: list[JournalEntry] = []

    async def put(entry: JournalEntry) -> None:
        written.append(entry)

    rt = _runtime(tmp_path, journal_put=put)
    request = ModelRequest(key="k", role="filter", text="?")
    result = _replayed(
        ok=False, raw="MAYBE", error_code=codes.INVALID_CHOICE, error_message="why", simulated=True
    )
    asyncio.run(_journal(rt, request, result, "failed"))
    [entry] = written
    expected = JournalEntry(
        hash="h",
        key="k",
        role="filter",
        model="org/m",
        status="failed",
        raw="MAYBE",
        error_code=codes.INVALID_CHOICE,
        error_message="why",
        attempts=3,
        usage={"prompt_tokens": 5},
        simulated=True,
        created=entry.created,
    )
    assert entry == expected


def test_a_lone_request_reads_its_image_and_an_unreadable_one_is_bad_input(tmp_path: Path) -> None:
    image = tmp_path / "a.png"
    Image.new("RGB", (8, 8), (10, 120, 200)).save(image)
    rt = _runtime(tmp_path)  # no batch prefetch: the image is read in a thread
    assert asyncio.run(_image(rt, str(image))) == load_image(str(image))
    missing = str(tmp_path / "missing.png")
    request = ModelRequest(key="k", role="filter", text="?", image_path=missing)
    with pytest.raises(OSError) as caught:
        load_image(missing)
    got = asyncio.run(run_one(rt, request, str.strip, {}))
    message = f"cannot read image {missing}: {caught.value}"
    assert got == _failed(request, rt.role.model, codes.BAD_INPUT, message)
