"""The model client: one OpenAI-compatible client for every model stage, which never loses work.

Stages build `ModelRequest`s and a parse function; `run` returns one `ModelResult` per request,
in order: an answer, or a failure with a reason code and the raw answer. Completed requests are
journaled as they complete, so reruns replay them instead of calling the model again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from lenses_data.config.models import ModelsConfig
from lenses_data.models import types as codes
from lenses_data.models.calls import run_one
from lenses_data.models.committer import FlushingWriter, GroupCommitter
from lenses_data.models.endpoints import Endpoint, EndpointPool, make_endpoint
from lenses_data.models.images import ImagePrefetch
from lenses_data.models.journal import (
    Journal,
    JournalEntry,
    ShardJournal,
    refuse_single_file_journal,
    usage_totals,
)
from lenses_data.models.keys import resolve_api_key
from lenses_data.models.messages import default_json_mode
from lenses_data.models.probe import cached_probe
from lenses_data.models.progress import Progress, reporting
from lenses_data.models.reuse import AnswerIndex, replaced_runs, served_identity, stage_index
from lenses_data.models.runtime import RoleRuntime
from lenses_data.models.systemic import FailureWatch
from lenses_data.models.types import AnswerError, EndpointUnavailable, ModelRequest, ModelResult

__all__ = ["AnswerError", "ModelClient", "ModelRequest", "ModelResult"]

log = logging.getLogger("lenses_data.models")


class ModelClient:
    def __init__(
        self,
        config: ModelsConfig,
        journal: Journal | None = None,
        seed: int = 0,
        journal_root: Path | None = None,
    ) -> None:
        self.config = config
        self.journal = journal
        # RUN/journal: where per-shard journals go (see `shard_journal`); None: no journaling.
        self.journal_root = journal_root
        self._rng = random.Random(seed)
        self._keys: dict[str, str] = {}
        self.last_progress: Progress | None = None
        self.simulated_answers = 0  # answers from the lenses simulator over this client's life
        # Calls sent (attempts and re-asks included) and answers reused per source run, over this
        # client's life: the stage's summary reports them (per shard, as differences).
        self.calls_sent = 0
        self.reused: dict[str, int] = {}
        self._reuse: AnswerIndex | None = None  # models.reuse_answers_from, for the open shard's stage
        self.closed = False  # close() ran: the stage that owned this client is done with it

    @classmethod
    def from_config(
        cls, models_config: ModelsConfig, journal_dir: str | os.PathLike[str] | None = None
    ) -> ModelClient:
        """Client whose shards journal under `journal_dir` (e.g. RUN/"journal") when enabled."""
        enabled = models_config.journal.enabled and journal_dir is not None
        return cls(models_config, journal_root=Path(journal_dir) if enabled else None)

    @contextlib.contextmanager
    def shard_journal(self, path: Path) -> Iterator[None]:
        """Journal every answer of the block to `path`, the one file of the shard being processed.

        The task that owns a shard is the only writer of its file; a run with a single-file journal
        of an older version is refused. Without a journal root (journal disabled) this does nothing.
        """
        if self.journal_root is None:
            yield
            return
        if self.journal is not None:
            raise RuntimeError("a shard journal is already open on this client: one shard at a time")
        refuse_single_file_journal(self.journal_root)
        # Earlier answers, found by request before one is sent: the runs `models.reuse_answers_from`
        # names, and this run's journals a `--rebuild-changed` moved to RUN/_replaced/ (the stage
        # is the journal file's folder).
        stage = path.parent.name
        sources = [*self.config.reuse_answers_from, *replaced_runs(self.journal_root.parent, stage)]
        if sources:
            self._reuse = stage_index(sources, stage)
        self.journal = ShardJournal(path, self.config.journal.fsync)
        try:
            yield
        finally:
            journal, self.journal, self._reuse = self.journal, None, None
            if journal is not None:  # None: closed under the shard (`close`), which wrote it already
                journal.close()

    def close(self) -> None:
        """Close the open journal (its buffered answers are written first)."""
        self.closed = True
        if self.journal is not None:
            self.journal.close()
            self.journal = None

    def usage(self) -> dict[str, dict[str, int]]:
        """Token usage per model over everything journaled so far (cost accounting)."""
        return usage_totals(self.journal) if self.journal is not None else {}

    async def _runtime(self, role_name: str, journal_put: Any, needs: tuple[str, ...]) -> RoleRuntime:
        role = self.config.role(role_name)
        if role_name not in self._keys:
            self._keys[role_name] = await asyncio.to_thread(resolve_api_key, role_name, role)
        key = self._keys[role_name]
        endpoints = [make_endpoint(url, key, role.timeout_s, role.max_concurrency) for url in role.base_urls]
        pool = EndpointPool(endpoints, self.config.retry)
        try:
            return await self._prepared(role_name, role, pool, journal_put, needs)
        except BaseException:
            await pool.close()
            raise

    async def _prepared(
        self, role_name: str, role: Any, pool: EndpointPool, journal_put: Any, needs: tuple[str, ...]
    ) -> RoleRuntime:
        """The role's runtime, with the probe's modes (fallbacks) when probing is on."""
        endpoints = pool.endpoints
        runtime = RoleRuntime(
            name=role_name,
            role=role,
            pool=pool,
            choice_style=self.config.choice_style(role_name),
            retry=self.config.retry,
            journal=self.journal,
            reuse_failed=self.config.journal.reuse_failed,
            rng=self._rng,
            journal_put=journal_put,
            json_mode=default_json_mode(role),
            reuse=self._reuse,
        )
        if not self.config.probe:
            runtime.simulated_endpoint, runtime.served = await _probe_simulated(endpoints, role.model)
            return runtime
        report = await cached_probe(
            role_name, role, endpoints, self.config.retry, needs, runtime.json_mode, runtime.choice_style
        )
        error = report.error()
        if error is not None:
            raise error
        runtime.json_mode, runtime.choice_style = report.json_mode, report.choice_style
        runtime.tolerant_choice = report.tolerant_choice
        runtime.context_tokens = report.server.max_model_len if report.server else None
        runtime.simulated_endpoint = report.simulated
        runtime.served = report.served
        return runtime

    async def run(self, requests: Sequence[ModelRequest], parse: Callable[[str], Any]) -> list[ModelResult]:
        """One result per request, in order. Requests may mix roles; each role uses its endpoints."""
        results: list[ModelResult | None] = [None] * len(requests)
        by_role: dict[str, list[int]] = {}
        for index, request in enumerate(requests):
            by_role.setdefault(request.role, []).append(index)
        for role_name in by_role:
            self.config.role(role_name)  # unknown role: fail before any call
        progress = Progress(len(requests), self.config.progress_interval_s)
        self.last_progress = progress
        committer, journal_put = self._journal_writer()
        runtimes: list[RoleRuntime] = []
        outage: list[tuple[RoleRuntime, ModelResult]] = []
        watches = {name: FailureWatch.for_retry(name, self.config.retry) for name in by_role}
        try:
            for name, indices in by_role.items():
                needs = _needs(requests[i] for i in indices)
                runtimes.append(await self._runtime(name, journal_put, needs))
            async with reporting(progress):
                await asyncio.gather(
                    *(
                        self._drain(
                            rt, requests, by_role[rt.name], parse, results, progress, outage, watches[rt.name]
                        )
                        for rt in runtimes
                    )
                )
        finally:
            for runtime in runtimes:
                await runtime.pool.close()
            if committer is not None:
                committer.close()
        self.simulated_answers += progress.simulated
        self.calls_sent += progress.calls
        for result in results:
            if result is not None and result.reused_from:
                self.reused[result.reused_from] = self.reused.get(result.reused_from, 0) + 1
        if outage:  # answered requests are journaled by now; the caller's shard must not be written
            raise _outage_error(outage, results)
        for runtime in runtimes:  # most of a role's answers unusable: the role is broken, not the items
            if watches[runtime.name].systemic():
                raise watches[runtime.name].error(tuple(e.url for e in runtime.pool.endpoints))
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:  # a bug, not a model failure: say so instead of returning holes
            raise RuntimeError(f"model client lost {len(missing)} results (first index {missing[0]})")
        return results  # type: ignore[return-value]

    def _journal_writer(self) -> tuple[GroupCommitter | FlushingWriter | None, Any]:
        """How completed requests are written (committer.py): buffered and flushed to the OS within
        a few milliseconds, or through a group committer when every commit is fsynced."""
        journal = self.journal
        if journal is None:
            return None, None
        if self.config.journal.fsync:
            committer = GroupCommitter(journal)
            return committer, committer.put
        if isinstance(journal, ShardJournal):
            writer = FlushingWriter(journal)
            return writer, writer.put

        async def put(entry: JournalEntry) -> None:
            journal.put(entry)

        return None, put

    async def _drain(
        self,
        runtime: RoleRuntime,
        requests: Sequence[ModelRequest],
        indices: list[int],
        parse: Callable[[str], Any],
        results: list[ModelResult | None],
        progress: Progress,
        outage: list[tuple[RoleRuntime, ModelResult]],
        watch: FailureWatch,
    ) -> None:
        pending = iter(indices)
        inflight: dict[str, asyncio.Future[ModelResult]] = {}

        async def worker() -> None:
            for index in pending:
                if outage or watch.systemic():  # send nothing new, let in-flight finish
                    return
                request = requests[index]
                try:
                    result = await run_one(runtime, request, parse, inflight)
                except Exception as exc:  # never lose the item, even to a bug: record it and move on
                    log.exception("unexpected error on model request %s", request.key)
                    result = ModelResult(
                        key=request.key,
                        ok=False,
                        error_code=codes.INTERNAL_ERROR,
                        error_message=f"{type(exc).__name__}: {exc}",
                        model=runtime.role.model,
                    )
                if not result.ok and result.error_code in codes.INFRASTRUCTURE_CODES:
                    outage.append((runtime, result))
                    continue
                results[index] = result
                watch.record(result)
                progress.record(
                    result.ok, result.cached, result.simulated, 0 if result.cached else result.attempts
                )

        runtime.images = ImagePrefetch(requests[i].image_path for i in indices)
        runtime.images.start()
        try:
            # One worker per slot. A worker waiting for its image's replica can leave a slot
            # elsewhere idle; extra workers won that back only at 2 slots an endpoint, and would
            # send requests after an outage is declared (docs/benchmarks.md, bench_affinity).
            workers = min(len(indices), runtime.pool.capacity)
            await asyncio.gather(*(worker() for _ in range(workers)))
        finally:
            await runtime.images.close()

    def run_sync(self, requests: Sequence[ModelRequest], parse: Callable[[str], Any]) -> list[ModelResult]:
        """`run` for synchronous callers; safe to call from inside a running event loop too."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.run(requests, parse))
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as executor:
            return executor.submit(asyncio.run, self.run(requests, parse)).result()


def _needs(requests: Iterable[ModelRequest]) -> tuple[str, ...]:
    """What a batch of one role's requests asks of its server (see probe.ROLE_NEEDS)."""
    needs: set[str] = set()
    for request in requests:
        if request.json_schema is not None:
            needs.add("json")
        if request.choice:
            needs.add("choice")
        if request.image_path:
            needs.add("image")
    return tuple(sorted(needs))


def _outage_error(
    outage: list[tuple[RoleRuntime, ModelResult]], results: list[ModelResult | None]
) -> EndpointUnavailable:
    runtime, first = outage[0]
    urls = tuple(e.url for e in runtime.pool.endpoints)
    answered = sum(r is not None for r in results)
    not_sent = len(results) - answered - len(outage)
    message = (
        f"model role {runtime.name!r}: endpoint {', '.join(urls)} failed {len(outage)} request(s) after "
        f"{runtime.retry.max_attempts} attempt(s) each ({first.error_code}: {first.error_message}). "
        f"{answered} request(s) answered (journaled), {not_sent} not sent; nothing is written or "
        "rejected for this shard: rerun to retry."
    )
    return EndpointUnavailable(
        message,
        role=runtime.name,
        urls=urls,
        code=first.error_code or "",
        failed=len(outage),
        answered=answered,
    )


async def _probe_simulated(endpoints: list[Endpoint], model: str) -> tuple[bool | None, str | None]:
    """Whether the role is served by the lenses simulator (True/False, None if no endpoint
    answered), and the served model as listed (reuse.served_identity). Used so simulated answers
    in a journal are never replayed against a real model, nor answers of another served model."""
    for endpoint in endpoints:
        try:
            listing = await endpoint.client.with_options(timeout=10.0).models.list()
        except Exception:  # down or not OpenAI-compatible: ask the next one
            continue
        simulated = any(str(m.id).startswith(codes.SIMULATED_MODEL_PREFIX) for m in listing.data)
        return simulated, served_identity(listing.data, model)
    return None, None
