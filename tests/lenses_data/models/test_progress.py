"""Long batches log progress at intervals and count simulated answers; the loud banner is the stage's."""

from __future__ import annotations

import logging

import pytest

from lenses_data.models.client import ModelClient, ModelRequest
from lenses_data.models.parsing import parse_choice
from lenses_data.simulator.testing import sim_models_config


def test_progress_lines_and_simulated_banner(simulator, caplog: pytest.LogCaptureFixture) -> None:
    with simulator(latency_s=0.1, faults={"http_500": 0.2}, faults_until_attempt=1) as url:
        config = sim_models_config([url], concurrency=2).model_copy(update={"progress_interval_s": 0.1})
        client = ModelClient(config)
        requests = [
            ModelRequest(key=f"p{i}", role="filter", text="?", after_image_text=str(i), choice=["YES", "NO"])
            for i in range(12)
        ]
        with caplog.at_level(logging.INFO, logger="lenses_data.models"):
            results = client.run_sync(requests, parse_choice(["YES", "NO"]))
    assert all(r.ok for r in results)
    lines = [r.getMessage() for r in caplog.records if r.name == "lenses_data.models"]
    periodic = [line for line in lines if line.startswith("model requests ")]
    assert len(periodic) >= 2
    assert any("model requests 12/12" in line and "failed 0" in line for line in lines)
    assert lines[-1].startswith("done: model requests 12/12") and lines[-1].endswith("simulated 12")
    assert not any("SIMULATED ANSWERS" in line for line in lines)  # once per stage, not per batch
    assert client.simulated_answers == 12
    assert client.last_progress.calls == sum(r.attempts for r in results) > 12
