"""The endpoint probe against the simulator's real-server faults over HTTP: fallbacks are chosen
and used, a refused image part stops before any work is sent, `lenses check` reports and gates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lenses_app.cli import main
from lenses_data.config.models import ModelsConfig
from lenses_data.models import probe
from lenses_data.models.client import ModelClient, ModelRequest
from lenses_data.models.parsing import parse_choice, pick_choice
from lenses_data.models.types import INVALID_CHOICE, AnswerError, CapabilityMissing
from lenses_data.simulator.simulator import free_port
from lenses_data.simulator.testing import sim_models_config, sim_stats

CHOICES = ["YES", "NO"]


@pytest.fixture(autouse=True)
def _fresh_probe_cache():
    probe.forget()
    yield
    probe.forget()


@pytest.mark.parametrize(
    ("text", "expected"),
    [("Yes.", "YES"), ("I would say yes, clearly", "YES"), ("NOTE: the answer is no", "NO"), ("no", "NO")],
)
def test_pick_choice_finds_the_one_choice_in_free_text(text: str, expected: str) -> None:
    assert pick_choice(text, CHOICES) == expected


@pytest.mark.parametrize("text", ["Yes and no.", "Maybe", "NOTED, YESTERDAY"])
def test_pick_choice_rejects_ambiguous_or_absent_choices(text: str) -> None:
    with pytest.raises(AnswerError) as raised:
        pick_choice(text, CHOICES)
    assert raised.value.code == INVALID_CHOICE


def _choice_requests(n: int, image: Path | None = None) -> list[ModelRequest]:
    return [
        ModelRequest(
            key=f"filter:{i}",
            role="filter",
            text="Does this image support clearly different non-literal readings? Answer YES or NO.",
            image_path=str(image) if image else None,
            after_image_text=f"candidate {i}",
            choice=CHOICES,
        )
        for i in range(n)
    ]


def _work_keys(url: str) -> list[str]:
    return [k for k in sim_stats(url)["keys"].values() if not k.startswith("probe:")]


def test_healthy_simulator_passes_every_check(sim_url: str) -> None:
    reports = probe.check_roles(sim_models_config([sim_url]), list(probe.ROLE_NEEDS))
    assert [r.role for r in reports] == list(probe.ROLE_NEEDS)
    for report in reports:
        assert report.ok and report.simulated is True
        assert {c.status for c in report.checks} == {"ok"}
        # `lenses check` also measures the prefix cache (three more requests; not before each stage).
        expected = ["server", "model", *probe.ROLE_NEEDS[report.role], "prefix"]
        assert [c.capability for c in report.checks] == expected
        assert "no GET /version" in report.checks[0].detail and report.server.version is None
    assert reports[2].json_mode == "json_schema"
    # No GET /version: the client speaks the pinned release's dialect (0.32.0: structured_outputs).
    assert ModelsConfig().vllm_version == "0.32.0"
    assert reports[0].choice_style == "structured_outputs"


@pytest.mark.parametrize(
    ("release", "field"),
    [("0.10.1.1", "guided_choice"), ("0.11.0", "structured_outputs"), ("0.32.0", "structured_outputs")],
)
def test_the_choice_field_follows_the_release_the_server_reports(simulator, release: str, field: str) -> None:
    # The config pins 0.32.0 (structured_outputs), which a 0.10.x server ignores without an error, as
    # 0.12+ ignores guided_choice: the probe asks the server its release and sends the field that
    # release reads, and the YES/NO constraint holds (no tolerant fallback).
    import httpx

    with simulator(vllm_version=release, record_requests=50) as url:
        config = sim_models_config([url])
        (report,) = probe.check_roles(config, ["filter"])
        recorded = httpx.get(url.removesuffix("/v1") + "/sim/requests", timeout=5).json()["requests"]
    assert report.server.version == release and f"vLLM {release}" in report.checks[0].detail
    assert report.ok and not report.tolerant_choice
    assert {c.capability: c.status for c in report.checks}["choice"] == "ok"
    with_choice = [e["body"] for e in recorded if "PROBE-ALPHA" in json.dumps(e["body"])]
    assert with_choice and all(field in body for body in with_choice)


def test_work_requests_carry_the_choice_field_of_the_reported_release(simulator) -> None:
    # The config pins 0.32.0 (structured_outputs); the server says it is 0.10.1.1, which reads only
    # guided_choice. The probe's own requests are checked above: here the pipeline's requests, sent
    # after the probe, must carry the probe's field too, or the constraint is silently ignored.
    import httpx

    assert ModelsConfig().choice_style("filter") == "structured_outputs"
    with simulator(vllm_version="0.10.1.1", record_requests=100) as url:
        client = ModelClient(sim_models_config([url], probe=True))
        results = client.run_sync(_choice_requests(6), _exact_choice)
        recorded = httpx.get(url.removesuffix("/v1") + "/sim/requests", timeout=5).json()["requests"]
    work = [e["body"] for e in recorded if e["key"].startswith("filter:")]
    # (The simulator records a request as that release reads it: a structured_outputs field is gone.)
    assert len(work) == 6 and all("guided_choice" in body for body in work)
    # The constraint held: every answer is the bare token, accepted by the exact parser.
    assert all(r.ok for r in results) and {r.value for r in results} <= set(CHOICES)


def test_a_release_that_ignores_the_pinned_field_is_caught_without_its_version(simulator) -> None:
    # The same 0.32 server with the role forced to guided_choice: the constraint is ignored, and the
    # probe says so (tolerant fallback) instead of trusting it.
    with simulator(vllm_version="0.32.0") as url:
        config = sim_models_config([url])
        forced = config.filter.model_copy(update={"structured_outputs": "guided"})
        (report,) = probe.check_roles(config.model_copy(update={"filter": forced}), ["filter"])
    choice = {c.capability: c for c in report.checks}["choice"]
    assert choice.status == "fallback" and "ignored" in choice.detail and report.tolerant_choice


def _exact_choice(text: str) -> str:
    """A stage parser that accepts nothing but the bare token (like Listing 1's)."""
    if text not in CHOICES:
        raise AnswerError(INVALID_CHOICE, f"not a bare choice: {text!r}")
    return text


def test_ignored_choice_falls_back_to_tolerant_parsing(simulator) -> None:
    with simulator(server_faults={"ignore_choice": True}, yes_rate=0.5) as url:
        client = ModelClient(sim_models_config([url], probe=True))
        results = client.run_sync(_choice_requests(20), _exact_choice)
    assert all(r.ok for r in results)
    assert {r.value for r in results} == {"YES", "NO"}
    # The answers were sentences, not tokens: tolerant parsing found the choice in each.
    assert all(len(r.raw.split()) > 2 and r.value.lower() in r.raw.lower() for r in results)


def test_probe_runs_once_for_the_shards_of_a_run(simulator) -> None:
    with simulator() as url:
        config = sim_models_config([url], probe=True)
        for _ in range(3):  # three shards, each with its own client (as Prefect tasks have)
            assert all(r.ok for r in ModelClient(config).run_sync(_choice_requests(2), parse_choice(CHOICES)))
        probes = [k for k in sim_stats(url)["keys"].values() if k.startswith("probe:")]
    assert probes == ["probe:filter"]  # one choice check, asked once


def test_refused_image_part_stops_before_any_work(simulator, tmp_path: Path) -> None:
    from PIL import Image

    image = tmp_path / "scene.png"
    Image.new("RGB", (24, 24), (10, 120, 200)).save(image)
    with simulator(server_faults={"reject_images": True}) as url:
        client = ModelClient(sim_models_config([url], probe=True))
        with pytest.raises(CapabilityMissing) as raised:
            client.run_sync(_choice_requests(4, image), parse_choice(CHOICES))
        work = _work_keys(url)
    assert raised.value.capability == "image" and url in str(raised.value)
    assert "image part refused" in str(raised.value)
    assert work == []


def test_refused_json_schema_completes_or_stops_clearly(simulator) -> None:
    from pydantic import BaseModel

    from lenses_data.models.parsing import parse_model

    class Answer(BaseModel):
        caption: str

    requests = [
        ModelRequest(
            key=f"v:{i}",
            role="validator",
            text=f"Describe scene {i}.",
            json_schema=Answer.model_json_schema(),
        )
        for i in range(5)
    ]
    with simulator(server_faults={"reject_json_schema": True}) as url:
        client = ModelClient(sim_models_config([url], probe=True))
        try:
            results = client.run_sync(requests, parse_model(Answer))
        except CapabilityMissing as error:  # no JSON mode the simulator honours: a clear stop
            assert error.capability == "json" and "json_schema: refused" in str(error)
            assert _work_keys(url) == []
        else:  # a fallback worked: every answer is valid, none was asked with json_schema
            assert all(r.ok for r in results)
            assert sim_stats(url)["server_faults"].get("reject_json_schema", 0) >= 1


def _write_config(tmp_path: Path, url: str) -> Path:
    roles = {role: {"model": f"test/{role}", "base_urls": [url], "timeout_s": 5} for role in probe.ROLE_NEEDS}
    retry = {"backoff_base_s": 0.001, "backoff_max_s": 0.01, "max_attempts": 2}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"models": {**roles, "retry": retry}}))
    return path


def test_check_command_reports_and_gates(simulator, tmp_path: Path, capsys) -> None:
    with simulator() as url:
        assert main(["check", "--config", str(_write_config(tmp_path, url))]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["role", "endpoint", "capability", "status", "detail"]
    assert all(f"{role}: usable" in out for role in probe.ROLE_NEEDS)

    with simulator(server_faults={"reject_images": True, "ignore_choice": True}) as url:
        code = main(["check", "--config", str(_write_config(tmp_path, url)), "--role", "filter"])
    captured = capsys.readouterr()
    lines = {tuple(line.split()[2:4]) for line in captured.out.splitlines()[1:]}
    assert code == 1
    assert {("model", "ok"), ("choice", "fallback"), ("image", "fail")} <= lines
    assert "role filter cannot work" in captured.err

    dead = f"http://127.0.0.1:{free_port()}/v1"
    code = main(["check", "--config", str(_write_config(tmp_path, dead)), "--role", "validator"])
    captured = capsys.readouterr()
    assert code == 1 and dead in captured.out and "endpoint" in captured.out


def test_image_probe_sends_the_roles_processor_settings(simulator) -> None:
    """A server refusing the filter's one-tile setting, or counting the role's image placeholder
    differently, must fail the probe, not every request."""
    import httpx

    with simulator(record_requests=50) as url:
        config = sim_models_config([url])
        one_tile = config.filter.model_copy(update={"mm_processor_kwargs": {"max_dynamic_patch": 1}})
        config = config.model_copy(update={"filter": one_tile})
        (report,) = probe.check_roles(config, ["filter"])
        recorded = httpx.get(url.removesuffix("/v1") + "/sim/requests", timeout=5).json()["requests"]
    bodies = [entry["body"] for entry in recorded]
    assert report.ok
    with_image = [b for b in bodies if any(isinstance(m["content"], list) for m in b["messages"])]
    # Every image request carries the setting, except the one baseline of the tile check (the same
    # wide image without it, to see the setting change the token count).
    settings = [b.get("mm_processor_kwargs") for b in with_image]
    assert settings.count(None) == 1 and settings.count({"max_dynamic_patch": 1}) == len(with_image) - 1
    for body in with_image:  # the placeholder as the role's requests write it, just before the image
        kinds = [(part["type"], part.get("text")) for part in body["messages"][0]["content"]]
        slot = kinds.index(("image_url", None))
        assert kinds[slot - 1] == ("text", config.filter.image_placeholder) == ("text", "<image>")


SERVER_AND_MODEL_OK = (
    "server ok (no GET /version: the config's vllm_version decides (choice constraint as "
    "structured_outputs)); model ok (the lenses simulator answers any model name); "
)
CHOICE_OK = "choice ok (structured_outputs choice honoured)"
CHOICE_IGNORED = "choice fallback (structured_outputs choice ignored (answered 'PROBE-OMEGA, the scene invites more than'); tolerant parsing of free text)"


@pytest.mark.parametrize(
    ("faults", "level", "choice"),
    [({}, "INFO", CHOICE_OK), ({"ignore_choice": True}, "WARNING", CHOICE_IGNORED)],
)
def test_the_shards_of_a_run_log_one_probe_line_with_every_check(
    simulator, caplog, faults, level, choice
) -> None:
    caplog.set_level("INFO", logger="lenses_data.models.probe")
    with simulator(server_faults=faults) as url, simulator(server_faults=faults) as other:
        config = sim_models_config([url, other], probe=True)
        for _ in range(3):  # three shards share the cached probe: one line, not three
            ModelClient(config).run_sync(_choice_requests(2), parse_choice(CHOICES))
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "lenses_data.models.probe"]
    assert lines == [(level, f"probe of role filter at {url}, {other}: {SERVER_AND_MODEL_OK}{choice}")]
