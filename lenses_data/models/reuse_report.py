"""What a build paid for its model answers: per stage, calls sent and answers reused (from which run).

Counted twice, for two readers. A stage's summary counts what this invocation did (the client's
counters, per shard as differences: `shard_calls`, summed by `summary_calls`); the funnel (CLI,
Prefect run page) shows it. The dataset card counts the whole run from its journal
(`tally_calls`): an answer copied from another run carries its `source_run`, every other answer
cost its `attempts` in calls, so a run resumed after a kill still reports all it paid.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from lenses_data.models.journal import JournalEntry

CALLS = "calls_sent"
REUSED = "answers_reused"  # {source run: answers}


def client_calls(client: Any) -> tuple[int, dict[str, int]]:
    """The client's counters now (a stage without a model client: nothing)."""
    return int(getattr(client, "calls_sent", 0) or 0), dict(getattr(client, "reused", None) or {})


def shard_calls(client: Any, before: tuple[int, dict[str, int]]) -> dict[str, Any]:
    """A shard's `ShardStats.extra` entries: calls and reuses since `before` (model stages only)."""
    if client is None or not hasattr(client, "calls_sent"):
        return {}
    calls, reused = client_calls(client)
    grown = {run: count - before[1].get(run, 0) for run, count in reused.items()}
    return {CALLS: calls - before[0], REUSED: {run: n for run, n in grown.items() if n}}


def summary_calls(extras: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """A stage summary's entries from its shards' extras; empty when no shard asked a model."""
    calls, reused, seen = 0, {}, False
    for extra in extras:
        if CALLS in extra:
            seen = True
            calls += int(extra[CALLS])
            for run, count in (extra.get(REUSED) or {}).items():
                reused[run] = reused.get(run, 0) + int(count)
    return {CALLS: calls, REUSED: dict(sorted(reused.items()))} if seen else {}


def reused_total(summary: dict[str, Any]) -> int:
    return sum(int(n) for n in (summary.get(REUSED) or {}).values())


def reuse_sources_line(summaries: Iterable[dict[str, Any]]) -> str:
    """`answers reused from RUN (filter 30, generate 40)`, one clause per source run; '' if none."""
    by_run: dict[str, list[str]] = {}
    for summary in summaries:
        for run, count in (summary.get(REUSED) or {}).items():
            by_run.setdefault(run, []).append(f"{summary.get('stage')} {count}")
    clauses = [f"{run} ({', '.join(parts)})" for run, parts in sorted(by_run.items())]
    return "answers reused from " + "; ".join(clauses) if clauses else ""


def tally_calls(entries: Iterable[JournalEntry], totals: dict[str, dict[str, Any]]) -> Iterator[JournalEntry]:
    """Pass a run's journal entries on, counting per stage (the key's first part) the calls its
    answers cost and the answers reused per source run, into `totals`."""
    for entry in entries:
        stage = entry.key.split(":", 1)[0]
        bucket = totals.setdefault(stage, {CALLS: 0, REUSED: {}})
        if entry.source_run:
            bucket[REUSED][entry.source_run] = bucket[REUSED].get(entry.source_run, 0) + 1
        else:
            bucket[CALLS] += int(entry.attempts)
        yield entry
