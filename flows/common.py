"""Shared pieces of the Prefect flows: parameters, run names, the flow-run id for the run lock, task runners.

Flows stay thin: they map `lenses_data` stages over shards, set retries and cache policies and
publish what happened. No stage logic lives here.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from lenses_data.config import ENV_PREFIX, PipelineConfig, deep_merge, resolve_config


def load_run_config(
    config_path: str | None = None, run_dir: str | None = None, overrides: dict[str, Any] | None = None
) -> PipelineConfig:
    """The config of a run from the flat flow parameters, in `resolve_config`'s one precedence:
    file, then `LENSES__` environment, then `overrides`, then `run_dir`.

    Resolved once per process and parameters: `lenses run`, the flow-run name and the flow body
    ask with the same parameters and get the same frozen object. The key holds the file's size and
    modification time and the environment, so an edited file or a changed variable resolves anew."""
    explicit = deep_merge(overrides or {}, {"run_dir": run_dir} if run_dir else {})
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(ENV_PREFIX)))
    return _resolved(config_path, _file_stamp(config_path), json.dumps(explicit, sort_keys=True), env)


def _file_stamp(config_path: str | None) -> tuple[int, int] | None:
    try:
        stat = Path(config_path).stat() if config_path else None
    except OSError:  # missing: resolve_config says so
        return None
    return (stat.st_mtime_ns, stat.st_size) if stat else None


@functools.lru_cache(maxsize=16)
def _resolved(
    config_path: str | None, stamp: tuple[int, int] | None, explicit: str, env: tuple[tuple[str, str], ...]
) -> PipelineConfig:
    return resolve_config(config_path, json.loads(explicit), dict(env))


def run_label(run_dir: str | os.PathLike[str]) -> str:
    """A short, stable name for a run directory: its last part (the part people recognise)."""
    name = Path(run_dir).expanduser().resolve().name or "root"
    return artifact_key(name) or "run"


def run_slug(run_dir: str | os.PathLike[str]) -> str:
    """Artifact-key prefix of a run directory: its name plus a hash of the full path.

    Two datasets never share history, even when both directories are called `nightly`.
    """
    full = str(Path(run_dir).expanduser().resolve())
    return f"{run_label(run_dir)}-{hashlib.sha1(full.encode()).hexdigest()[:8]}"


def pipeline_run_dir(params: dict[str, Any]) -> str:
    """The run directory a pipeline flow's parameters point at (its `run_dir`, else the config's)."""
    if params.get("run_dir"):
        return str(params["run_dir"])
    try:  # a broken config fails the run itself, with its own message; a name never does
        return load_run_config(params.get("config_path"), None, params.get("overrides")).run_dir
    except Exception:  # noqa: BLE001
        return Path(str(params.get("config_path") or "defaults")).stem


def export_run_dir(params: dict[str, Any]) -> str:
    """Training and evaluation runs are named after the build whose export they read (RUN/export)."""
    export = params.get("export_dir")
    if export:
        return str(Path(str(export)).parent)
    return str(params.get("out_dir") or params.get("config_path") or "run")


def run_name_from_parameters(
    suffix: str, directory: Callable[[dict[str, Any]], str] = pipeline_run_dir
) -> Callable[[], str]:
    """A `flow_run_name` callable: `<run directory name>-<suffix>`, from the run's parameters."""

    def name() -> str:
        from prefect.runtime import flow_run

        return f"{run_label(directory(dict(flow_run.parameters or {})))}-{suffix}"

    return name


def current_flow_run_id() -> str | None:
    """The flow run's id, for the run lock's owner file (who holds the run directory)."""
    from prefect.runtime import flow_run

    return flow_run.get_id()


def _missing(runner: str, package: str) -> RuntimeError:
    return RuntimeError(f"task_runner {runner!r} needs `pip install {package}`")


def make_task_runner(config: PipelineConfig, stage: str | None = None):
    """Thread pool on one machine; Dask or Ray when configured and installed. With `stage`, its own
    values (`orchestration.stages.<stage>`, e.g. `max_workers`) over the global ones."""
    settings = config.orchestration.for_stage(stage) if stage else config.orchestration
    if settings.task_runner == "dask":
        try:
            from prefect_dask import DaskTaskRunner
        except ImportError as error:
            raise _missing("dask", "prefect-dask") from error
        options = dict(settings.runner_options)
        if settings.runner_address:  # an existing cluster: the options go to its distributed.Client
            return DaskTaskRunner(address=settings.runner_address, client_kwargs=options or None)
        # A temporary LocalCluster: the options are its cluster_kwargs (n_workers, threads_per_worker, ...)
        return DaskTaskRunner(cluster_kwargs=options or None)
    if settings.task_runner == "ray":
        try:
            from prefect_ray import RayTaskRunner
        except ImportError as error:
            raise _missing("ray", "prefect-ray") from error
        return RayTaskRunner(address=settings.runner_address, init_kwargs=settings.runner_options or None)
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=settings.max_workers)


@contextlib.contextmanager
def one_cluster_per_build(config: PipelineConfig) -> Iterator[PipelineConfig]:
    """Dask without an address: one LocalCluster for every stage of a build, not one per stage
    (Ray: one connection per build, `one_ray_connection_per_build`).

    Why: starting a LocalCluster costs ~20 s on 2 cores, so a rerun with nothing left to do took
    3.5 min over 9 stages. The stages get the cluster's address, as with an existing cluster;
    `runner_options` are its LocalCluster arguments, as DaskTaskRunner would have passed them."""
    settings = config.orchestration
    if settings.task_runner == "ray":
        with one_ray_connection_per_build(config):
            yield config
        return
    if settings.task_runner != "dask" or settings.runner_address:
        yield config
        return
    try:
        from distributed import LocalCluster
    except ImportError as error:
        raise _missing("dask", "prefect-dask") from error
    with LocalCluster(**settings.runner_options) as cluster:
        shared = settings.model_copy(
            update={"runner_address": cluster.scheduler_address, "runner_options": {}}
        )
        yield config.model_copy(update={"orchestration": shared})


@contextlib.contextmanager
def one_ray_connection_per_build(config: PipelineConfig) -> Iterator[None]:
    """Ray: the build's driver connects once (`ray.init`), and every stage's RayTaskRunner uses it.

    Why: a RayTaskRunner that connects itself disconnects when its stage ends, and each connection
    is a new Ray job whose worker processes start cold (import Prefect, torch and the stages): ~30 s
    per stage on 2 cores. Without `runner_address` this starts one local Ray for the whole build."""
    try:
        import ray
    except ImportError as error:
        raise _missing("ray", "prefect-ray") from error
    if ray.is_initialized():  # a caller's connection: theirs to close
        yield
        return
    settings = config.orchestration
    # The namespace RayTaskRunner would have used, unless the options name one.
    ray.init(settings.runner_address, **{"namespace": "prefect", **settings.runner_options})
    try:
        yield
    finally:
        ray.shutdown()


def artifact_key(text: str) -> str:
    """Prefect artifact keys allow lowercase letters, digits and dashes only."""
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")
