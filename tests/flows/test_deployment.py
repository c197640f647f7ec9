"""Prefect as its users meet it, on a real `prefect server` backed by PostgreSQL with a process worker.

- The README's "Deploy to a Prefect server" commands, run as written, register every deployment
  of prefect.yaml; a GPU deployment without LENSES_IMAGE is refused, never registered imageless.
- The CI job's script (.github/workflows/regenerate-dataset.yml), run as written against the
  sample deployment, builds the dataset and exits 0; the run page holds the funnel and tables.
- The server keeps its records in PostgreSQL (its deployments and the CI run's flow run are rows
  there), not in a SQLite file.
- A bad parameter: an unknown name is refused before any run exists; a missing config file fails
  the run in seconds, without retries or tracebacks, its reason in the `--watch` output.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pandas as pd
import pytest
import yaml

from tests.support.prefect_server import REPO_ROOT, prefect_env

PREFECT = str(Path(sys.executable).parent / "prefect")
FENCE = "`" * 3


def _prefect(args: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PREFECT, "--no-prompt", *args],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _bash(script: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**env, "PATH": f"{Path(sys.executable).parent}:{env['PATH']}"}  # `prefect` as CI finds it
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def readme_deploy_commands() -> str:
    text = (REPO_ROOT / "README.md").read_text()
    after = text.split("<!-- deploy-commands:", 1)[1]
    return after.split(f"{FENCE}bash\n", 1)[1].split(FENCE, 1)[0]


def ci_run_script() -> str:
    workflow = yaml.safe_load((REPO_ROOT / ".github/workflows/regenerate-dataset.yml").read_text())
    steps = workflow["jobs"]["regenerate"]["steps"]
    return next(step["run"] for step in steps if step.get("name") == "Run the deployment and wait for it")


def _pg_fetch(url: str, query: str, *args: object) -> list[tuple]:
    """Rows of `query` read straight from the server's PostgreSQL database, not through the API."""

    async def fetch() -> list[tuple]:
        conn = await asyncpg.connect(url)
        try:
            return [tuple(row) for row in await conn.fetch(query, *args)]
        finally:
            await conn.close()

    return asyncio.run(fetch())


def _flow_run_id(output: str) -> str:
    match = re.search(r"UUID: ([0-9a-f-]{36})", output)
    assert match, output[-3000:]
    return match.group(1)


@pytest.fixture(scope="module")
def server_env(prefect_server) -> Iterator[dict[str, str]]:
    api_url, home = prefect_server
    env = {**prefect_env(home, api_url), "COLUMNS": "250"}  # rich wraps the CLI output at 80 otherwise
    env.pop("LENSES_IMAGE", None)
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: api_url}):  # this process's client reads the same server
        yield env


@pytest.fixture(scope="module")
def deployed(server_env) -> dict[str, subprocess.CompletedProcess]:
    """The README's commands as written, `deploy --all` again (an update: where Prefect 3.9 warns
    about `schedules: []`); then one GPU deployment again, without LENSES_IMAGE."""
    readme = _bash(readme_deploy_commands(), server_env)
    image = re.search(r"^export LENSES_IMAGE=(\S+)", readme_deploy_commands(), re.M)
    again = _prefect(["deploy", "--all"], {**server_env, "LENSES_IMAGE": image.group(1) if image else ""})
    _prefect(["deployment", "delete", "build-dataset/production-gpu"], server_env)
    no_image = _prefect(["deploy", "--name", "production-gpu"], server_env)
    return {"readme": readme, "again": again, "no_image": no_image}


@pytest.fixture(scope="module")
def worker(deployed, server_env, tmp_path_factory) -> Iterator[Path]:
    log_path = tmp_path_factory.mktemp("worker") / "worker.log"
    env = {**server_env, "PREFECT_WORKER_QUERY_SECONDS": "1"}  # pick runs up within a second
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [PREFECT, "worker", "start", "--pool", "lenses-local"],
            env=env,
            cwd=REPO_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield log_path
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def _deployments_on_server() -> dict[str, dict]:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        flows = {f.id: f.name for f in client.read_flows(limit=200)}
        return {
            f"{flows[d.flow_id]}/{d.name}": {"pool": d.work_pool_name, "job_variables": d.job_variables}
            for d in client.read_deployments(limit=200)
        }


@pytest.mark.slow
def test_readme_commands_register_every_deployment(deployed):
    readme, again = deployed["readme"], deployed["again"]
    for ran in (readme, again):  # warning-free on Prefect 3.9, first deploy and update alike
        output = ran.stdout + ran.stderr
        assert ran.returncode == 0, output[-3000:]
        assert not [line for line in output.splitlines() if "Warning" in line], output[-3000:]
    spec = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    assert not [d["name"] for d in spec["deployments"] if d.get("schedules") == []]
    expected = {d["name"] for d in spec["deployments"]}
    on_server = _deployments_on_server()
    assert {name.split("/")[1] for name in on_server} | {"production-gpu"} == expected
    gpu = [name for name, d in on_server.items() if d["pool"] == "lenses-gpu"]
    assert len(gpu) == 2  # h200x8 and evaluate-gpu; production-gpu was deleted and refused below
    for name in gpu:
        assert on_server[name]["job_variables"]["image"] == "registry.example.org/lenses/pipeline:latest"

    refused = deployed["no_image"]
    assert refused.returncode != 0
    assert "LENSES_IMAGE is not set" in refused.stdout + refused.stderr
    assert "build-dataset/production-gpu" not in _deployments_on_server()


@pytest.mark.slow
def test_server_keeps_its_records_in_postgresql(deployed, prefect_server, prefect_postgres):
    on_server = {name.split("/")[1] for name in _deployments_on_server()}
    in_postgres = {name for (name,) in _pg_fetch(prefect_postgres.url, "select name from deployment")}
    assert in_postgres == on_server and "sample-local" in in_postgres
    _, home = prefect_server
    assert not list(home.rglob("*.db"))  # no SQLite database beside it


@pytest.mark.slow
def test_ci_recipe_runs_the_sample_deployment_to_completion(server_env, worker, prefect_postgres, tmp_path):
    from flows.reporting import funnel_key, stage_key
    from tests.flows.prefect_api import run_artifacts, run_logs

    run_dir = tmp_path / "ci-run"
    env = {
        **server_env,
        "DEPLOYMENT": "build-dataset/sample-local",
        "RUN_DIR": str(run_dir),
        "WATCH_TIMEOUT": "600",
    }
    started = time.monotonic()
    ran = _bash(ci_run_script(), env, timeout=660)
    elapsed = time.monotonic() - started
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, output[-4000:] + worker.read_text()[-4000:]
    assert "Flow run finished successfully in 'Completed'" in output
    assert "ingest finished" in output  # lenses_data lines stream in `--watch` with Prefect's own
    print(f"CI recipe, sample deployment: {elapsed:.1f} s")

    flow_run_id = _flow_run_id(output)
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(flow_run_id)
    assert flow_run.name == "ci-run-build"
    assert flow_run.parameters["config_path"] == "configs/sample.yaml"  # kept: only run_dir was set
    in_postgres = _pg_fetch(
        prefect_postgres.url, "select name, state_type::text from flow_run where id = $1::uuid", flow_run_id
    )
    assert in_postgres == [("ci-run-build", "COMPLETED")]
    artifacts = run_artifacts(flow_run_id)
    assert funnel_key(str(run_dir)) in artifacts
    stages = [
        "ingest",
        "dedupe",
        "filter",
        "split",
        "generate",
        "rules",
        "validate",
        "visual_validate",
        "export",
    ]
    assert all(stage_key(str(run_dir), s) in artifacts for s in stages)
    banners = [log for log in run_logs(flow_run_id) if "SIMULATED ANSWERS" in log.message]
    assert len(banners) == 4  # one per model stage

    images = pd.read_parquet(run_dir / "export" / "images.parquet")
    captions = pd.read_parquet(run_dir / "export" / "captions.parquet")
    manifest = json.loads((run_dir / "export" / "manifest.json").read_text())
    assert len(images) > 0 and set(captions.image_id) <= set(images.image_id)
    assert manifest["simulated"] is True and str(captions.lens.dtype) == "category"


@pytest.mark.slow
def test_bad_parameters_fail_fast_and_say_why(server_env, worker, tmp_path):
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        runs_before = len(client.read_flow_runs(limit=200))
    unknown = _prefect(
        ["deployment", "run", "build-dataset/sample-local", "--param", "rundir=/tmp/x"], server_env
    )
    assert unknown.returncode != 0
    assert "rundir" in unknown.stdout and "run_dir" in unknown.stdout  # the valid names are listed
    not_a_stage = _prefect(
        ["deployment", "run", "build-dataset/sample-local", "--param", "stop_after=dedup"], server_env
    )
    assert not_a_stage.returncode != 0 and "dedup" in not_a_stage.stdout
    with get_client(sync_client=True) as client:
        assert len(client.read_flow_runs(limit=200)) == runs_before  # refused before any run existed

    started = time.monotonic()
    missing = _prefect(
        [
            "deployment", "run", "build-dataset/sample-local",
            "--param", "config_path=configs/missing.yaml", "--param", f"run_dir={tmp_path / 'bad'}",
            "--watch", "--watch-timeout", "120",
        ],
        server_env,
        timeout=180,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    output = missing.stdout + missing.stderr
    assert missing.returncode == 1, output[-3000:]
    # the reason as an event line (shown on any server) and as the run's first error log line
    assert re.search(
        r"lenses\.flow-run\.failed \* config error: config file\s+not found: configs/missing\.yaml", output
    )
    assert output.count("config error: config file not found: configs/missing.yaml") >= 1
    assert "Flow run finished in state 'Failed'" in output

    with get_client(sync_client=True) as client:
        flow_run = client.read_flow_run(_flow_run_id(output))
        task_runs = client.read_task_runs(limit=50)
    assert flow_run.state.message == "config error: config file not found: configs/missing.yaml"
    assert flow_run.run_count == 1 and flow_run.total_run_time.total_seconds() < 10
    from_creation = (flow_run.end_time - flow_run.created).total_seconds()  # queue + worker + process start
    assert from_creation < 30, from_creation
    assert not [t for t in task_runs if t.flow_run_id == flow_run.id]  # failed before any task: no retries
    from tests.flows.prefect_api import run_logs

    logs = run_logs(flow_run.id)
    errors = [log.message for log in logs if log.level >= 40]
    assert errors[0] == "config error: config file not found: configs/missing.yaml"
    # one traceback: the engine's closing one for any failed run (it shows where the ConfigError came from)
    tracebacks = [i for i, log in enumerate(logs) if "Traceback" in log.message]
    assert len(tracebacks) == 1 and "ConfigError" in logs[tracebacks[0]].message
    assert tracebacks[0] > [log.message for log in logs].index(errors[0])
    print(
        f"bad config_path: {flow_run.total_run_time.total_seconds():.1f} s of run time, "
        f"{from_creation:.1f} s from creation to Failed, {elapsed:.1f} s for the whole CLI command"
    )
