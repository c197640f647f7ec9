"""Stages set up once per worker and reused across that worker's shards.

Building a stage (and its model client: endpoints, keys, the journal's fallback reader) for every
shard repeats work whose result does not change within a stage run. A worker here is the thread
that runs shard tasks: the thread runner's pool threads, or a Dask/Ray worker's executor
threads. One instance per thread, because a model client journals one shard at a time.

Entries are keyed by (thread, stage name, config digest, stage-run token). The coordinator
releases a token when its stage run ends; on a remote worker (another process) an older token's
entry is closed when the same thread starts the same stage of a later run.
"""

from __future__ import annotations

import hashlib
import threading
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
setups = 0  # stages built by this process for shard work (read by tests and benchmarks)


def config_digest(config: PipelineConfig) -> str:
    return hashlib.sha256(config.model_dump_json().encode()).hexdigest()[:16]


def worker_stage(stage_name: str, config: PipelineConfig, token: str) -> Stage:
    """This thread's stage for `token`, built (with its model client) on first use."""
    global setups
    key = _Key(threading.get_ident(), stage_name, config_digest(config), token)
    with _lock:
        stage = _stages.get(key)
        stale = [k for k in _stages if k != key and k[:3] == key[:3]]
        old = [_stages.pop(k) for k in stale]
    for item in old:
        _close(item)
    if stage is None:
        stage = build_stage(stage_name, config)
        with _lock:
            _stages[key] = stage
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
    """Close every stage of this process built for `token` (the stage run has ended)."""
    with _lock:
        keys = [k for k in _stages if k.token == token]
        released = [_stages.pop(k) for k in keys]
    for stage in released:
        _close(stage)
    return len(released)


def _close(stage: Stage) -> None:
    client = getattr(stage, "client", None)
    if client is not None:
        client.close()
