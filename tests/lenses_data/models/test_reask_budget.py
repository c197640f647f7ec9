"""A re-ask repeats the bad answer only as far as the served context allows (vLLM refuses a prompt
that, with max_tokens, passes its max_model_len: the re-ask would become a client error)."""

from __future__ import annotations

from lenses_data.models.messages import CUT_MARK, REASK_TURN_TOKENS, fit_repeated_answer, reask_note

PROBLEM = "invalid_json: JSON is not closed"


def test_unknown_context_sends_the_answer_whole() -> None:
    raw = "x " * 500
    assert fit_repeated_answer(raw, {"prompt_tokens": 10}, PROBLEM, 100, None) == raw
    assert fit_repeated_answer(raw, {}, PROBLEM, 100, 2048) == raw  # no usage: nothing to measure


def test_an_answer_that_fits_is_repeated_whole() -> None:
    raw = "word " * 100  # 100 tokens of 5 characters
    usage = {"prompt_tokens": 500, "completion_tokens": 100}
    assert fit_repeated_answer(raw, usage, PROBLEM, 256, 4096) == raw


def test_a_long_answer_is_cut_so_the_reask_fits_the_context() -> None:
    # The case: 2048 tokens served, a prompt of 700, an answer of max_tokens (1024) of junk.
    raw = "{ " * 1024  # 2 characters a token
    usage = {"prompt_tokens": 700, "completion_tokens": 1024}
    cut = fit_repeated_answer(raw, usage, PROBLEM, 1024, 2048)
    assert cut is not None and cut.endswith(CUT_MARK) and len(cut) < len(raw)
    note_tokens = len(reask_note(PROBLEM)) / 2 * 1.1 + REASK_TURN_TOKENS
    reask_prompt = 700 + (len(cut) - len(CUT_MARK)) / 2 + note_tokens
    assert reask_prompt + 1024 <= 2048


def test_no_room_even_for_the_note_means_no_reask() -> None:
    usage = {"prompt_tokens": 1900, "completion_tokens": 100}
    assert fit_repeated_answer("bad " * 25, usage, PROBLEM, 100, 2048) is None
