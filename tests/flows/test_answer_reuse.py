"""Answers reused across runs (issue 41, item 1): the sample pool built against an external
`lenses simulate` that counts its calls, then rebuilt four ways, each with its calls asserted.

(a) an unchanged rerun in the same run directory sends 0 calls; (b) a new run directory with
`models.reuse_answers_from` naming the first sends 0 calls, exports the same caption ids and says
in its funnel and card where the answers came from; (c) a changed visual-validator seed sends
exactly that role's requests again; (d) failures (a 5xx, a 4xx, an unusable answer) and an answer
of another served model in the source journal are asked again, nothing else.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from flows.build import build_dataset
from lenses_data.config.models import ROLES
from lenses_data.merge import deep_merge
from lenses_data.models.journal import read_run_journal
from lenses_data.models.reuse import forget_indexes
from lenses_data.simulator.testing import sim_stats

REPO_ROOT = Path(__file__).resolve().parents[2]


def _reset(url: str) -> None:
    import httpx

    httpx.post(url.removesuffix("/v1") + "/sim/reset", timeout=5)


def _config(folder: Path, name: str, pool: Path, url: str, **models: object) -> str:
    config = yaml.safe_load((REPO_ROOT / "configs" / "sample.yaml").read_text())
    roles = {role: {"model": f"test/{role}", "base_urls": [url], "timeout_s": 10} for role in ROLES}
    config.update(run_dir=str(folder / name), yields={"accept": True})
    config["ingest"]["sources"] = [str(pool), str(pool / "cc3m.tsv")]
    # No endpoint probe: its requests would be counted with the build's.
    config["models"] = deep_merge({**roles, "probe": False}, models)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _build(url: str, config: str) -> tuple[dict, list[str]]:
    """The build's result and the request keys of every call the simulator received for it."""
    _reset(url)
    forget_indexes()
    result = build_dataset(config_path=config)
    stats = sim_stats(url)
    return result, sorted(stats["keys"][digest] for digest in stats["calls"])


def _caption_ids(run: Path) -> list[str]:
    return sorted(pd.read_parquet(run / "export" / "captions.parquet")["text_id"])


def _calls(result: dict) -> int:
    return sum(int(s.get("calls_sent", 0)) for s in result["stages"])


def _reused(result: dict) -> dict[str, int]:
    return {s["stage"]: sum(s.get("answers_reused", {}).values()) for s in result["stages"]}


@pytest.fixture(scope="module")
def first(prefect_harness, simulator, sample_pool, tmp_path_factory) -> tuple[Path, list[str]]:
    folder = tmp_path_factory.mktemp("reuse")
    config = _config(folder, "first", sample_pool, simulator)
    result, keys = _build(simulator, config)
    assert len(keys) > 50 and _calls(result) >= len(keys)
    return folder / "first", keys


@pytest.mark.slow
def test_an_unchanged_rerun_sends_no_call(first, simulator) -> None:
    run, _ = first
    result, keys = _build(simulator, str(run.parent / "first.yaml"))
    assert keys == [] and _calls(result) == 0


@pytest.mark.slow
def test_a_new_run_reusing_the_first_sends_no_call_and_exports_the_same_captions(
    first, simulator, sample_pool
) -> None:
    run, first_keys = first
    config = _config(run.parent, "second", sample_pool, simulator, reuse_answers_from=[str(run)])
    result, keys = _build(simulator, config)
    assert keys == [] and _calls(result) == 0
    second = run.parent / "second"
    assert _caption_ids(second) == _caption_ids(run)
    # Every answer the first run asked for is in the second's journal, copied with its source.
    copied = list(read_run_journal(second))
    assert len(copied) == len(list(read_run_journal(run))) >= len(set(first_keys))
    assert all(e.source_run == str(run) for e in copied)
    assert all(Path(e.source_file).is_relative_to(run / "journal") for e in copied)
    by_stage = _reused(result)
    assert sum(by_stage.values()) == len(copied) and by_stage["filter"] > 0 and by_stage["generate"] > 0
    card = (second / "export" / "README.md").read_text()
    assert f"answers reused from {run}" in card


@pytest.mark.slow
def test_a_changed_seed_sends_only_that_roles_requests(first, simulator, sample_pool) -> None:
    run, first_keys = first
    seeded = {"visual_validator": {"sampling": {"seed": 7}}}
    config = _config(run.parent, "seeded", sample_pool, simulator, reuse_answers_from=[str(run)], **seeded)
    result, keys = _build(simulator, config)
    assert keys == sorted(k for k in first_keys if k.startswith("visual_validate:"))
    assert keys and _reused(result)["visual_validate"] == 0 and _reused(result)["validate"] > 0


def _spoil(journal: Path, stage: str, changes: list[dict]) -> list[str]:
    """Rewrite the first successes of `stage` in a journal with `changes` (one each); their keys."""
    spoiled: list[str] = []
    for path in sorted((journal / stage).glob("part-*.jsonl")):
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            entry = json.loads(line)
            if entry["status"] == "ok" and len(spoiled) < len(changes):
                lines[number] = json.dumps({**entry, **changes[len(spoiled)]})
                spoiled.append(entry["key"])
        path.write_text("\n".join(lines) + "\n")
    return spoiled


@pytest.mark.slow
def test_failures_and_other_served_models_are_asked_again(first, simulator, sample_pool) -> None:
    run, _ = first
    import shutil

    source = run.parent / "spoiled"
    shutil.copytree(run / "journal", source / "journal")
    failed = {"status": "failed", "raw": None}
    spoiled = _spoil(
        source / "journal",
        "filter",
        [
            {**failed, "error_code": "server_error", "error_message": "HTTP 500"},
            {**failed, "error_code": "client_error", "error_message": "HTTP 400"},
            {**failed, "error_code": "invalid_choice", "error_message": "MAYBE"},
            {"served": json.dumps({"id": "simulated/test/filter", "root": "other/weights"})},
        ],
    )
    config = _config(run.parent, "third", sample_pool, simulator, reuse_answers_from=[str(source)])
    result, keys = _build(simulator, config)
    assert keys == sorted(spoiled) and len(spoiled) == 4
    assert _calls(result) == 4
