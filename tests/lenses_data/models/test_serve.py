"""`lenses serve --dry-run` prints the exact vLLM commands for a one-H200 and an eight-H200 node."""

from __future__ import annotations

import json
import shlex

import pytest

from lenses_app.cli import main
from lenses_data.config.models import ModelsConfig
from lenses_data.models.serve import ServeOptions, plan_replicas


def _commands(capsys: pytest.CaptureFixture[str], *argv: str) -> list[list[str]]:
    assert main(["serve", "--dry-run", "--role", "generator", *argv]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line and not line.startswith("#")]
    return [shlex.split(line) for line in lines]


def test_dry_run_one_h200(capsys: pytest.CaptureFixture[str]) -> None:
    (command,) = _commands(capsys, "--gpus", "1")
    assert command[:3] == ["CUDA_VISIBLE_DEVICES=0", "vllm", "serve"]
    assert command[3] == "OpenGVLab/InternVL3_5-38B"
    assert "--trust-remote-code" in command
    flags = dict(zip(command[4::1], command[5::1], strict=False))
    assert flags["--tensor-parallel-size"] == "1"
    assert flags["--port"] == "8000"
    assert json.loads(flags["--limit-mm-per-prompt"]) == {"image": 1, "video": 0}
    assert float(flags["--gpu-memory-utilization"]) == ModelsConfig().generator.serve.gpu_memory_utilization
    assert int(flags["--max-model-len"]) == ModelsConfig().generator.serve.max_model_len


def test_dry_run_eight_h200_runs_eight_replicas(capsys: pytest.CaptureFixture[str]) -> None:
    commands = _commands(capsys, "--gpus", "8")
    assert len(commands) == 8
    assert [c[0] for c in commands] == [f"CUDA_VISIBLE_DEVICES={i}" for i in range(8)]
    assert [c[c.index("--port") + 1] for c in commands] == [str(8000 + i) for i in range(8)]
    assert all(c[c.index("--tensor-parallel-size") + 1] == "1" for c in commands)


def test_validator_is_text_only_and_two_gpu_replicas_split_the_node() -> None:
    config = ModelsConfig.model_validate(
        {"validator": {"model": "Qwen/Qwen2.5-32B-Instruct", "serve": {"gpus_per_replica": 2, "port": 9000}}}
    )
    replicas = plan_replicas(config, "validator", gpus=8)
    assert [r.gpus for r in replicas] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert all(
        "--limit-mm-per-prompt" not in r.argv and "--trust-remote-code" not in r.argv for r in replicas
    )
    assert [r.base_url for r in replicas][-1] == "http://127.0.0.1:9003/v1"
    with pytest.raises(ValueError):
        plan_replicas(config, "validator", gpus=1)


def test_choice_field_follows_pinned_vllm_version() -> None:
    assert ModelsConfig(vllm_version="0.10.1.1").choice_style("filter") == "guided"
    assert ModelsConfig(vllm_version="0.11.0").choice_style("filter") == "structured_outputs"
    pinned = ModelsConfig.model_validate({"filter": {"model": "m", "structured_outputs": "none"}})
    assert pinned.choice_style("filter") == "none"


def test_constraint_fields_on_the_wire() -> None:
    from lenses_data.models.messages import constraint_kwargs
    from lenses_data.models.types import ModelRequest

    role = ModelsConfig().filter
    choice = ModelRequest(key="k", role="filter", text="?", choice=["YES", "NO"])
    assert constraint_kwargs(choice, role, "structured_outputs") == {
        "extra_body": {"structured_outputs": {"choice": ["YES", "NO"]}}
    }
    assert constraint_kwargs(choice, role, "guided") == {"extra_body": {"guided_choice": ["YES", "NO"]}}
    assert constraint_kwargs(choice, role, "none") == {}
    schema = {"title": "Caption List!", "type": "object", "properties": {"a": {"type": "string"}}}
    fmt = constraint_kwargs(
        ModelRequest(key="k", role="generator", text="?", json_schema=schema), role, "guided"
    )
    assert fmt["extra_body"]["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Caption_List_", "schema": schema},
    }


def _serve_lines(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    code = main(["serve", "--dry-run", *argv])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def test_a_role_with_a_key_binds_all_interfaces_and_passes_the_key_only_in_the_environment(
    tmp_path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    config = tmp_path / "keyed.yaml"
    config.write_text(yaml.safe_dump({"models": {"validator": {"api_key_env": "LENSES_TEST_KEY"}}}))
    monkeypatch.setenv("LENSES_TEST_KEY", "s3cret-value")
    code, lines, _ = _serve_lines(capsys, "--role", "validator", "--config", str(config))
    (command,) = [shlex.split(line) for line in lines if line and not line.startswith("#")]
    assert code == 0 and command[command.index("--host") + 1] == "0.0.0.0"
    assert "VLLM_API_KEY=<value of $LENSES_TEST_KEY>" in command and "--api-key" not in command
    assert not any("s3cret" in line for line in lines)
    replica = plan_replicas(
        ModelsConfig.model_validate({"validator": {"api_key_env": "LENSES_TEST_KEY"}}),
        "validator",
        1,
        options=ServeOptions(host="0.0.0.0", api_key="s3cret-value", key_source="value of $LENSES_TEST_KEY"),
    )[0]
    assert replica.process_env()["VLLM_API_KEY"] == "s3cret-value"
    assert "s3cret" not in " ".join(replica.argv) and "s3cret" not in replica.shell()


def test_without_a_key_the_server_stays_on_loopback(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines, _ = _serve_lines(capsys, "--role", "validator")
    (command,) = [shlex.split(line) for line in lines if line and not line.startswith("#")]
    assert code == 0 and command[command.index("--host") + 1] == "127.0.0.1"
    assert not any("VLLM_API_KEY" in part for part in command)
    code, _, err = _serve_lines(capsys, "--role", "validator", "--host", "0.0.0.0")
    assert code == 2 and "without an API key" in err


@pytest.mark.parametrize(
    ("release", "role", "flagged"),
    [
        ("0.32.0", "filter", True),
        ("0.32.0", "generator", True),  # shares the filter's server, which sends the one-tile setting
        ("0.32.0", "validator", False),
        ("0.10.1.1", "filter", False),  # no such flag: per-request settings are accepted as they are
    ],
)
def test_trust_request_mm_kwargs_follows_the_release(release: str, role: str, flagged: bool) -> None:
    config = ModelsConfig(vllm_version=release)
    (replica,) = plan_replicas(config, role, 1)
    assert ("--trust-request-mm-kwargs" in replica.argv) is flagged


def test_vllm_python_runs_the_server_module() -> None:
    options = ServeOptions(vllm_python="/opt/vllm/bin/python", version="0.32.0")
    (replica,) = plan_replicas(ModelsConfig(), "validator", 1, options=options)
    assert replica.argv[:4] == ["/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model"]
    assert replica.argv[4] == "Qwen/Qwen2.5-32B-Instruct"


@pytest.mark.parametrize(
    ("release", "flags"),
    [
        ("0.10.1.1", ["--guided-decoding-backend", "xgrammar", "--guided-decoding-disable-any-whitespace"]),
        ("0.32.0", ["--structured-outputs-config", '{"backend":"xgrammar","disable_any_whitespace":true}']),
    ],
)
def test_compact_json_is_asked_for_as_each_release_names_it(release: str, flags: list[str]) -> None:
    (replica,) = plan_replicas(ModelsConfig(vllm_version=release), "validator", 1)
    start = replica.argv.index(flags[0])
    assert replica.argv[start : start + len(flags)] == flags
    off = ModelsConfig.model_validate(
        {"vllm_version": release, "validator": {"serve": {"compact_json": False}}}
    )
    assert flags[0] not in plan_replicas(off, "validator", 1)[0].argv
