"""The production path against vLLM itself (0.32, CPU build), serving the tiny models of the kit.

What the simulator cannot show: the request fields a real release reads (choice constraint, image
placeholder, processor settings), its refusals (context overflow, a refused field) and the CLI's
exit codes for them, the served context, and `lenses serve` starting a real server that requires
its key."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pandas as pd
import pytest
import yaml

from lenses_data.config.models import ModelsConfig
from lenses_data.models.serve import ServeOptions, check_with_vllm_parser, plan_replicas
from lenses_data.simulator.simulator import free_port
from tests.realvllm.pipeline_config import write_config
from tests.realvllm.vllm_server import SERVER_ENV
from tests.support.serve_cli import lenses_serve_command

# A server start (60-70 s idle, minutes on a busy machine) is paid inside the first test of each.
pytestmark = [pytest.mark.slow, pytest.mark.realvllm, pytest.mark.timeout(2400)]
REPO = Path(__file__).resolve().parents[2]
MODEL_STAGES = ("filter", "generate", "validate", "visual_validate")


def _lenses(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **SERVER_ENV, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    command = [sys.executable, "-m", "lenses_app.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env)


def _check_rows(stdout: str) -> dict[tuple[str, str], tuple[str, str]]:
    """`lenses check`'s table as (role, capability) -> (status, detail)."""
    rows = {}
    for line in stdout.splitlines()[1:]:
        parts = line.split(maxsplit=4)
        if len(parts) >= 4 and parts[1].startswith("http"):
            rows[(parts[0], parts[2])] = (parts[3], parts[4] if len(parts) > 4 else "")
    return rows


def test_lenses_check_reports_ok_for_every_capability_a_role_needs(vllm_internvl, vllm_validator, tmp_path):
    config = write_config(tmp_path, vllm_internvl, vllm_validator)
    done = _lenses("check", "--config", str(config), timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = _check_rows(done.stdout)
    needs = {
        "filter": ("choice", "image"),
        "generator": ("json", "image"),
        "validator": ("json",),
        "visual_validator": ("json", "image"),
    }
    for role, capabilities in needs.items():
        for capability in ("server", "model", *capabilities, "prefix"):
            status, detail = rows[(role, capability)]
            assert status == "ok", f"{role} {capability}: {status} {detail}"
        # The config names 0.10.1.1 (guided_choice); the server says 0.32 and the client follows it.
        assert "vLLM 0.32" in rows[(role, "server")][1]
        assert "4096 tokens of context" in rows[(role, "server")][1]
    assert "structured_outputs choice honoured" in rows[("filter", "choice")][1]
    # The one-tile setting in this format's name (max_patches) takes effect: fewer prompt tokens.
    assert "take effect" in rows[("filter", "image")][1]
    assert "came from the prefix cache" in rows[("validator", "prefix")][1]
    for role in needs:  # the role's real requests, measured by vLLM, fit the 4096 tokens served
        status, detail = rows[(role, "context")]
        assert status == "ok" and "of the 4096 tokens served" in detail, f"{role} context: {detail}"


def test_lenses_check_counts_the_prompt_as_vllm_does_and_fails_past_the_context(
    vllm_internvl, vllm_validator, tmp_path
):
    """The context line's prompt count is vLLM's own for the stage's real request; one token of
    max_tokens past the room it leaves, the check fails. (vLLM 0.32 does not refuse that request, as
    0.10.1.1 did: it cuts max_tokens to the room left, `get_max_tokens`, so long answers come back cut.)"""
    import re

    from lenses_data.config import load_config
    from lenses_data.models.messages import build_messages
    from lenses_data.stages.sample_requests import representative_requests

    def check(max_tokens: int) -> tuple[int, str]:
        override = {"models": {"validator": {"sampling": {"max_tokens": max_tokens}}}}
        config = write_config(tmp_path, vllm_internvl, vllm_validator, override)
        done = _lenses("check", "--config", str(config), "--role", "validator", timeout=900)
        return done.returncode, " ".join(_check_rows(done.stdout)[("validator", "context")])

    code, line = check(16)
    found = re.search(r"\((\w+) batch of \d+ texts\) needs (\d+) prompt tokens", line)
    assert code == 0 and found, line
    kind, prompt = found.group(1), int(found.group(2))
    room = 4096 - prompt
    code, line = check(room + 1)
    assert code == 1 and line.startswith("fail") and f"at most {room}," in line, line

    config = load_config(str(write_config(tmp_path, vllm_internvl, vllm_validator)))
    [request] = [r for label, r in representative_requests(config)["validator"] if label.startswith(kind)]
    # The stage's request one token past the room: 0.32 answers it (max_tokens cut), counting the
    # prompt as the check did. A stop at the first space keeps the answer short.
    body = {"model": vllm_validator.served_model_name, "messages": build_messages(request, None)}
    answer = httpx.post(
        f"{vllm_validator.base_url}/chat/completions",
        json={**body, "max_tokens": room + 1, "stop": [" "]},
        timeout=600,
    )
    assert answer.status_code == 200 and answer.json()["usage"]["prompt_tokens"] == prompt, answer.text[:500]


def test_a_whole_build_on_real_vllm_accounts_for_every_record(vllm_internvl, vllm_validator, tmp_path):
    config = write_config(tmp_path, vllm_internvl, vllm_validator)
    done = _lenses("run", "--config", str(config))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    run = tmp_path / "run"
    manifest = json.loads((run / "export" / "manifest.json").read_text())
    assert manifest["simulated"] is False
    counts = {c["stage"]: c for c in manifest["counts"]}
    for name, count in counts.items():
        if name != "generate":  # generate turns images into texts
            assert count["records_in"] == count["records_out"] + count["rejected"], count
    # Every model stage that got input was answered by vLLM (the tiny models' judgement decides how
    # far records get: the tiny validator often rewrites a fixed field, which discards the item).
    assert counts["filter"]["records_out"] > 0 and counts["generate"]["records_out"] > 0
    assert counts["validate"]["records_in"] == counts["rules"]["records_out"] > 0
    # Every candidate is exported or rejected with a reason; no model stage failed as a whole.
    rejections = pd.read_parquet(run / "export" / "rejections.parquet")
    assert rejections.reason.notna().all()
    assert not set(rejections.reason) & {"client_error", "server_error", "transport_error", "timeout"}
    answered = [json.loads(line) for path in (run / "journal").glob("*/part-*.jsonl") for line in path.open()]
    assert answered and not any(entry["simulated"] for entry in answered)
    stages = {path.parent.name for path in (run / "journal").glob("*/part-*.jsonl")}
    assert {"filter", "generate", "validate"} <= stages
    assert {entry["model"] for entry in answered} == {
        vllm_internvl.served_model_name,
        vllm_validator.served_model_name,
    }


@pytest.mark.parametrize(
    ("plant", "overrides", "said"),
    [
        # Every prompt plus max_tokens passes the served 4096 tokens: vLLM refuses each request.
        ("overflow", {"models": {"filter": {"sampling": {"max_tokens": 5000}}}}, "max_tokens"),
        # A field the server refuses on every request (min_tokens above max_tokens).
        ("refused field", {"models": {"filter": {"sampling": {"extra": {"min_tokens": 64}}}}}, "min_tokens"),
    ],
)
def test_a_planted_request_fault_fails_the_shard_with_exit_4_and_rejects_nothing(
    vllm_internvl, vllm_validator, tmp_path, plant, overrides, said
):
    config = write_config(tmp_path, vllm_internvl, vllm_validator, overrides)
    done = _lenses("run", "--config", str(config), "--stop-after", "filter")
    assert done.returncode == 4, f"{plant}: {done.returncode}\n{done.stderr[-4000:]}"
    said_all = done.stdout + done.stderr  # the error line, and the flow's log line before it
    assert "model role" in said_all and said in said_all.lower(), said_all[-3000:]
    assert "unusable for most of a shard" in said_all or "Nothing is written or rejected" in said_all
    run = tmp_path / "run"
    assert not list((run / "filter").glob("part-*.parquet"))
    assert not list((run / "rejections").glob("filter-*.parquet"))
    assert (run / "dedupe" / "_SUCCESS.json").exists()  # the stages before it finished


def test_vllm_own_parser_accepts_the_served_commands_and_refuses_an_unknown_flag(vllm_python_path):
    options = ServeOptions(vllm_python=str(vllm_python_path), version="0.32.0")
    engines = []
    for role in ("filter", "validator"):
        (replica,) = plan_replicas(ModelsConfig(), role, 1, options=options)
        engines.append(replica.argv[replica.argv.index("--model") + 1 :])
        check_with_vllm_parser(str(vllm_python_path), engines[-1])
    assert "--trust-request-mm-kwargs" in engines[0]
    with pytest.raises(ValueError, match="no-such-flag"):
        check_with_vllm_parser(str(vllm_python_path), [*engines[1], "--no-such-flag"])


def test_lenses_serve_starts_a_role_whose_server_requires_the_key(
    vllm_python_path, tiny_validator_model, tmp_path
):
    key, port = f"k-{os.getpid()}-{time.time_ns()}", free_port()
    serve = {"hf_model": str(tiny_validator_model), "port": port, "max_model_len": 2048, "dtype": "float32"}
    role = {"model": "served-validator", "api_key_env": "LENSES_TEST_VLLM_KEY", "serve": serve}
    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump({"models": {"validator": role}}))
    log = tmp_path / "serve.log"
    command = lenses_serve_command(config, vllm_python_path, "--health-timeout", "900")
    env = {**os.environ, **SERVER_ENV, "LENSES_TEST_VLLM_KEY": key}
    with log.open("w") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        _wait_for(log, "ready: ", process, 900)
        url = f"http://127.0.0.1:{port}/v1"
        body = {"model": "served-validator", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        assert httpx.post(f"{url}/chat/completions", json=body, timeout=60).status_code == 401
        wrong = {"Authorization": "Bearer not-the-key"}
        assert httpx.get(f"{url}/models", headers=wrong, timeout=30).status_code == 401
        right = {"Authorization": f"Bearer {key}"}
        answer = httpx.post(f"{url}/chat/completions", json=body, headers=right, timeout=120)
        assert answer.status_code == 200, answer.text
        assert not _command_lines_with(key), "the key is on some process's command line"
        assert f"--host 0.0.0.0 --port {port}" in log.read_text()  # a keyed role serves the network
    finally:
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=120)
    assert key not in log.read_text()  # neither `lenses serve` nor vLLM printed it


def _wait_for(log: Path, text: str, process: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in log.read_text(errors="replace"):
            return
        if process.poll() is not None:
            pytest.fail(f"lenses serve exited with {process.returncode}:\n{log.read_text()[-4000:]}")
        time.sleep(1)
    pytest.fail(f"no {text!r} after {timeout_s:.0f}s:\n{log.read_text()[-4000:]}")


def _command_lines_with(secret: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # the process ended
            continue
        if secret in text:
            found.append(text)
    return found
