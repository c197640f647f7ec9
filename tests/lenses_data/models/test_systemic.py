"""FailureWatch: when a batch's failures stop being the items' fault, and the evidence it gives.

Each test feeds a whole batch of outcomes and checks the decision against the rule stated in
models/systemic.py (the share is reached, not only passed) together with what the error carries:
every decided request counted once, every failure under its own code, the evidence samples the
first watched failures. Written against the survivors of `make mutation
MODULE=lenses_data/models/systemic.py` (docs/testing.md).
"""

from __future__ import annotations

from collections import Counter

import pytest

from lenses_data.models import types as codes
from lenses_data.models.systemic import FailureWatch
from lenses_data.models.types import ModelResult

URLS = ("http://a:8000/v1", "http://b:8000/v1")


def ok(key: str) -> ModelResult:
    return ModelResult(key=key, ok=True, value={"x": 1}, raw='{"x": 1}')


def failed(key: str, code: str, message: str | None = "bad", raw: str | None = None) -> ModelResult:
    return ModelResult(key=key, ok=False, error_code=code, error_message=message, raw=raw)


def watch_batch(results: list[ModelResult], *, min_failures: int, share: float) -> FailureWatch:
    watch = FailureWatch("annotate", min_failures, share)
    for result in results:
        watch.record(result)
    return watch


def assert_accounts_for(watch: FailureWatch, results: list[ModelResult]) -> None:
    """Every decided request counted once; every failure under its code, no answer counted."""
    assert watch.decided == len({r.key for r in results}) == len(results)
    assert watch.counts == Counter(r.error_code for r in results if not r.ok)
    watched = {codes.CLIENT_ERROR, *codes.ANSWER_CODES}
    assert watch.failures == sum(1 for r in results if not r.ok and r.error_code in watched)


@pytest.mark.parametrize(
    ("refused", "answered", "systemic"),
    [(2, 2, True), (2, 8, False), (1, 0, False), (3, 3, True)],
    ids=["half-refused-is-the-share", "a-fifth-refused", "one-refusal-is-no-pattern", "half-of-six"],
)
def test_the_same_4xx_on_a_share_of_the_batch_is_systemic(refused, answered, systemic):
    """Two or more 4xx reaching the share (not only passing it) fail the shard; fewer are the items'."""
    results = [failed(f"r{i}", codes.CLIENT_ERROR) for i in range(refused)]
    results += [ok(f"a{i}") for i in range(answered)]
    watch = watch_batch(results, min_failures=50, share=0.5)  # the answer-error rule cannot fire
    assert_accounts_for(watch, results)
    assert watch.systemic() is systemic


@pytest.mark.parametrize(
    ("bad", "answered", "systemic"),
    [(3, 3, True), (3, 4, False), (2, 0, False), (3, 0, True)],
    ids=["half-bad-is-the-share", "under-the-share", "under-the-minimum", "all-bad"],
)
def test_answer_errors_reaching_the_share_after_the_minimum_are_systemic(bad, answered, systemic):
    results = [failed(f"b{i}", codes.SCHEMA_INVALID) for i in range(bad)]
    results += [ok(f"a{i}") for i in range(answered)]
    results += [failed("t0", codes.TIMEOUT)]  # infrastructure: counted, never evidence of a bad request
    watch = watch_batch(results, min_failures=3, share=3 / (bad + answered + 1) if systemic else 0.5)
    assert_accounts_for(watch, results)
    assert watch.systemic() is systemic


def test_an_empty_batch_is_never_systemic():
    assert FailureWatch("annotate", 1, 0.1).systemic() is False


def test_evidence_is_the_first_three_watched_failures_in_order():
    results = [failed("s0", codes.SERVER_ERROR, "upstream 502"), failed("t0", codes.TIMEOUT, "slow")]
    results += [failed(f"c{i}", codes.CLIENT_ERROR, f"context overflow {i}") for i in range(5)]
    watch = watch_batch(results, min_failures=2, share=0.5)
    assert_accounts_for(watch, results)
    assert watch.samples == [f"client_error: context overflow {i}" for i in range(3)]


def test_the_error_names_the_role_urls_counts_and_evidence():
    results = [failed(f"s{i}", codes.SCHEMA_INVALID, "missing lens", raw='{"a":  1}') for i in range(3)]
    results += [failed("c0", codes.CLIENT_ERROR, "field refused"), failed("x0", codes.SERVER_ERROR)]
    results += [ok("a0")]
    watch = watch_batch(results, min_failures=2, share=0.5)
    error = watch.error(URLS)
    assert (error.role, error.urls, error.decided) == ("annotate", URLS, 6)
    assert error.counts == {codes.SCHEMA_INVALID: 3, codes.CLIENT_ERROR: 1, codes.SERVER_ERROR: 1}
    assert error.message.startswith(
        "model role 'annotate' at http://a:8000/v1, http://b:8000/v1: 4 of 6 answered requests failed "
        "(schema_invalid 3, client_error 1), a rate no working model and server produce: the request, "
        "the server or the model is wrong, not the items. Nothing is written or rejected for this shard;"
    )
    sample = """schema_invalid: missing lens (answered '{"a": 1}')"""
    assert error.message.endswith(f"Evidence: {sample}; {sample}; {sample}")


def test_evidence_cuts_long_messages_and_answers_and_shows_what_is_missing():
    """A 4xx shows 240 characters of its message; an answer error 120, and 80 of the answer's words."""
    long_message = "m" * 300
    long_answer = "w " * 100
    results = [
        failed("c0", codes.CLIENT_ERROR, long_message),
        failed("c1", codes.CLIENT_ERROR, None),
        failed("e0", codes.INVALID_JSON, long_message, raw=long_answer),
    ]
    watch = watch_batch(results, min_failures=1, share=0.1)
    said = ("w " * 40)[:80]
    assert watch.samples == [
        f"client_error: {'m' * 240}",
        "client_error: ",
        f"invalid_json: {'m' * 120} (answered {said!r})",
    ]
    watch = watch_batch([failed("e1", codes.EMPTY_ANSWER, None, raw=None)], min_failures=1, share=0.1)
    assert watch.samples == ["empty_answer:  (answered '')"]
