"""`lenses check` compares each role's served context with what its real requests need, against the
simulator over real HTTP: a server refusing every request of the role (prompt + max_tokens over
its max_model_len) fails the check with the numbers; the same server with room passes it."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
import yaml

from lenses_app.cli import main
from lenses_data.annotation.prompts import get_template
from lenses_data.config import config_from_dict
from lenses_data.models import probe
from lenses_data.models.messages import build_messages
from lenses_data.stages.sample_requests import representative_requests

CONTEXT = 1536  # words, as the simulator counts prompt tokens


@pytest.fixture(autouse=True)
def _fresh_probe_cache():
    probe.forget()
    yield
    probe.forget()


def _config(tmp_path: Path, url: str, max_tokens: int) -> Path:
    validator = {"base_urls": [url], "timeout_s": 5, "sampling": {"max_tokens": max_tokens}}
    retry = {"backoff_base_s": 0.001, "backoff_max_s": 0.01, "max_attempts": 2}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"models": {"validator": validator, "retry": retry}}))
    return path


def _context_line(out: str) -> list[str]:
    [line] = [line for line in out.splitlines() if line.split()[2:3] == ["context"]]
    return line.split(maxsplit=4)


def _status_of_real_request(url: str, max_tokens: int) -> int:
    """What the server answers a validate request of the representative batch (the stage's own)."""
    config = config_from_dict({}, environ={})
    _, request = representative_requests(config)["validator"][0]
    body = {
        "model": config.models.validator.model,
        "messages": build_messages(request, None),
        "max_tokens": max_tokens,
    }
    return httpx.post(f"{url}/chat/completions", json=body, timeout=10).status_code


def test_a_validator_whose_requests_cannot_fit_fails_with_the_numbers(simulator, tmp_path, capsys):
    with simulator(max_model_len=CONTEXT) as url:
        code = main(["check", "--config", str(_config(tmp_path, url, 1024)), "--role", "validator"])
        refused = _status_of_real_request(url, 1024)
    captured = capsys.readouterr()
    _, _, _, status, detail = _context_line(captured.out)
    assert code == 1 and status == "fail", captured.out
    assert "role validator cannot work" in captured.err
    found = re.search(r"needs (\d+) prompt tokens \+ 1024 max_tokens = (\d+) > the 1536 tokens", detail)
    assert found, detail
    prompt, need = int(found.group(1)), int(found.group(2))
    assert need == prompt + 1024 > CONTEXT
    # The prompt is the real template rendered with a batch of texts, not an estimate of it.
    assert prompt > len(get_template("text_validation").text.split()) + 7 * 20
    assert f"max_tokens to at most {CONTEXT - prompt}" in detail
    assert refused == 400  # and the server does refuse that request


def test_the_same_server_with_room_for_the_answer_passes(simulator, tmp_path, capsys):
    with simulator(max_model_len=CONTEXT) as url:
        code = main(["check", "--config", str(_config(tmp_path, url, 256)), "--role", "validator"])
        answered = _status_of_real_request(url, 256)
    captured = capsys.readouterr()
    _, _, _, status, detail = _context_line(captured.out)
    assert code == 0 and status == "ok", captured.out
    assert re.search(r"needs \d+ prompt tokens \+ 256 max_tokens = \d+ of the 1536 tokens served", detail)
    assert answered == 200


def test_a_server_that_lists_no_context_is_not_measured(simulator, tmp_path, capsys):
    with simulator() as url:
        assert main(["check", "--config", str(_config(tmp_path, url, 1024)), "--role", "validator"]) == 0
    _, _, _, status, detail = _context_line(capsys.readouterr().out)
    assert status == "ok" and detail.startswith("not measured")


def test_image_roles_measure_their_real_requests_with_a_largest_grid_image(simulator, tmp_path):
    config = config_from_dict({}, environ={})
    samples = representative_requests(config)
    with simulator(max_model_len=100_000, record_requests=100) as url:
        roles = {role: {"base_urls": [url], "timeout_s": 5} for role in probe.ROLE_NEEDS}
        models = config_from_dict({"models": roles}, environ={}).models
        (report,) = probe.check_roles(models, ["generator"], samples)
        recorded = httpx.get(url.removesuffix("/v1") + "/sim/requests", timeout=5).json()["requests"]
    [context] = [c for c in report.checks if c.capability == "context"]
    assert context.status == "ok" and "generation" in context.detail
    measured = [
        r["body"] for r in recorded if r["body"].get("max_tokens") == 1 and "response_format" not in r["body"]
    ]
    templates = {get_template(name).text for name in ("captions", "image_side_prompts")}
    sent = [m["content"] for b in measured for m in b["messages"] if isinstance(m["content"], list)]
    sent = [parts for parts in sent if parts[0].get("text") in templates]
    assert len(sent) == 2  # both kinds of generation request, each with its image after the placeholder
    for parts in sent:
        assert [p["type"] for p in parts] == ["text", "text", "image_url"] and parts[1]["text"] == "<image>"
