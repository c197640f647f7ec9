"""Filter stage (Listing 1) through the production model client, over HTTP, against the simulator.

The simulator is scripted per request key (`SimConfig.scripted`: one answer per attempt), so every
kind of answer, and the re-ask that recovers from a bad one, goes through the real client: its
request format, its re-ask loop and its reason codes.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from lenses_data.annotation.prompts import get_template
from lenses_data.config import PipelineConfig
from lenses_data.models import types as codes
from lenses_data.models.client import ModelClient
from lenses_data.simulator.simulator import SimConfig, run_in_thread
from lenses_data.simulator.testing import sim_models_config, sim_stats
from lenses_data.stages import filter as filter_stage

MAX_REASKS = 2
# image id -> the model's answers, one per attempt (the last repeats).
SCRIPT = {
    "yes": ["YES"],
    "no": ["no."],
    "unsure": ["Maybe, it depends"],
    "empty": [""],
    "json": ['{"answer": "YES"}'],
    "recovers": ["unsure", "YES"],
}


def _images(folder: Path) -> pd.DataFrame:
    """One small real PNG per image id, each different (identical requests are sent only once)."""
    paths = []
    for index, image_id in enumerate(SCRIPT):
        path = folder / f"{image_id}.png"
        Image.new("RGB", (16, 16), (40 * index, 255 - 40 * index, 90)).save(path)
        paths.append(str(path))
    return pd.DataFrame({"image_id": list(SCRIPT), "path": paths})


def _calls_per_key(url: str) -> dict[str, int]:
    stats = sim_stats(url)
    counts: dict[str, int] = {}
    for digest, calls in stats["calls"].items():
        key = stats["keys"][digest]
        counts[key] = counts.get(key, 0) + calls
    return counts


@pytest.fixture(scope="module")
def filtered(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, int]]:
    frame = _images(tmp_path_factory.mktemp("filter-images"))
    scripted = {f"filter:{image_id}": answers for image_id, answers in SCRIPT.items()}
    with run_in_thread(SimConfig(scripted=scripted)) as url:
        client = ModelClient(sim_models_config([url], max_reasks=MAX_REASKS))
        decisions, rejected = filter_stage.FilterStage(PipelineConfig(), client=client).annotate_frame(frame)
        calls = _calls_per_key(url)
    return decisions, rejected, calls


def test_filter_decisions_and_rejections(filtered) -> None:
    decisions, rejected, _ = filtered
    by_id = decisions.set_index("image_id")
    assert by_id["decision"].to_dict() == {"yes": "YES", "no": "NO", "recovers": "YES"}
    assert by_id["passed"].to_dict() == {"yes": True, "no": False, "recovers": True}
    assert by_id.loc["no", "raw"] == "no."  # the answer as given, not as normalised
    assert (decisions["prompt_hash"] == get_template("filter").hash).all()
    assert decisions["simulated"].all()
    assert decisions["model"].str.startswith(codes.SIMULATED_MODEL_PREFIX).all()
    reasons = rejected.set_index("record_id")["reason"].to_dict()
    assert reasons == {
        "no": filter_stage.REJECT_NO,
        "unsure": codes.INVALID_CHOICE,
        "empty": codes.EMPTY_ANSWER,  # the client's own code for no content, before any parser
        "json": codes.INVALID_CHOICE,
    }
    raw = rejected.set_index("record_id")["raw"].to_dict()
    assert raw["unsure"] == "Maybe, it depends" and raw["json"] == '{"answer": "YES"}'
    assert "after 3 attempt(s)" in rejected.set_index("record_id").loc["unsure", "message"]


def test_filter_request_is_listing_1_with_the_image_and_a_yes_no_choice() -> None:
    request = filter_stage.FilterStage(PipelineConfig()).build_request(
        {"image_id": "a", "path": "/images/a.png"}
    )
    assert request.key == "filter:a" and request.role == "filter" and request.choice == ["YES", "NO"]
    assert request.image_path == "/images/a.png" and request.text == get_template("filter").text


def test_filter_reask_recovers_and_bad_answers_are_reasked(filtered) -> None:
    decisions, _, calls = filtered
    assert decisions.set_index("image_id").loc["recovers", "raw"] == "YES"
    assert calls["filter:recovers"] == 2  # asked, re-asked once, answered
    assert calls["filter:yes"] == calls["filter:no"] == 1
    assert calls["filter:unsure"] == calls["filter:json"] == calls["filter:empty"] == 1 + MAX_REASKS
