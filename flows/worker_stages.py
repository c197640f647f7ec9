"""Stages set up once per worker and reused across that worker's shards.

Building a stage (and its model client: endpoints, keys, the journal's fallback reader) for every
shard repeats work whose result does not change within a stage run. A worker here is the thread
that runs shard tasks: the thread runner's pool threads, or a Dask/Ray worker's executor
threads. One instance per thread, because a model client journals one shard at a time.

Entries are keyed by (thread, stage name, config digest, stage-run token). The coordinator
releases a token when its stage run ends; on a remote worker (another process) an older token's
entry is closed when the same thread starts the same stage of a later run. A stage run also ends
when one of its shards fails while shards in other threads are still running: their stages are
released then, but each is closed only when its own shard ends (`_busy`), never under a request.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterator
from typing import NamedTuple

from lenses_data.config import PipelineConfig
from lenses_data.stages.base import Stage
from lenses_data.stages.registry import build_stage


class _Key(NamedTuple):
    thread: int
    stage: str
    digest: str
    token: str


_lock = threading.Lock()
_stages: dict[_Key, Stage] = {}
_busy: set[_Key] = set()  # entries whose thread is running a shard on them now
_retired: dict[_Key, Stage] = {}  # released while busy: closed when that shard ends
setups = 0  # stages built by this process for shard work (read by tests and benchmarks)


def config_digest(config: PipelineConfig) -> str:
    return hashlib.sha256(config.model_dump_json().encode()).hexdigest()[:16]


@contextlib.contextmanager
def worker_stage(stage_name: str, config: PipelineConfig, token: str) -> Iterator[Stage]:
    """This thread's stage for `token` for one shard, built (with its model client) on first use.

    A release of `token` while the shard runs (another shard failed) closes the stage only when this
    block ends; a failure inside the block discards it, so a retry starts from a fresh one."""
    key = _Key(threading.get_ident(), stage_name, config_digest(config), token)
    stage = _acquire(key, stage_name, config)
    try:
        yield stage
    except BaseException:
        discard_worker_stage(stage_name, config, token)
        raise
    finally:
        with _lock:
            _busy.discard(key)
            retired = _retired.pop(key, None)
        if retired is not None:
            _close(retired)


def _acquire(key: _Key, stage_name: str, config: PipelineConfig) -> Stage:
    """The cached stage of `key` (or a new one), marked busy in the same step a release reads."""
    global setups
    with _lock:
        stage = _stages.get(key)
        if stage is not None:
            _busy.add(key)
        stale = [k for k in _stages if k != key and k[:3] == key[:3]]
        old = [_stages.pop(k) for k in stale]
    for item in old:  # the same thread's entries of an earlier stage run: never busy now
        _close(item)
    if stage is None:
        stage = build_stage(stage_name, config)
        try:
            stage.setup()
        except BaseException:
            stage.close()
            raise
        with _lock:
            _stages[key] = stage
            _busy.add(key)
            setups += 1
    return stage


def discard_worker_stage(stage_name: str, config: PipelineConfig, token: str) -> None:
    """Forget this thread's stage after a failed shard: a retry starts from a fresh one."""
    key = _Key(threading.get_ident(), stage_name, config_digest(config), token)
    with _lock:
        stage = _stages.pop(key, None)
    if stage is not None:
        _close(stage)


def release_worker_stages(token: str) -> int:
    """Close every stage of this process built for `token` (the stage run has ended); one whose
    thread is still running a shard is closed when that shard ends."""
    with _lock:
        keys = [k for k in _stages if k.token == token]
        released = [(k, _stages.pop(k)) for k in keys]
        idle = [stage for k, stage in released if k not in _busy]
        _retired.update((k, stage) for k, stage in released if k in _busy)
    for stage in idle:
        _close(stage)
    return len(released)


def _close(stage: Stage) -> None:
    stage.close()
