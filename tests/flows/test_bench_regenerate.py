"""benchmarks/bench_regenerate.py's pure parts: the changed config it regenerates with must change
exactly one rule (the caption word maximum), so the first stage it rebuilds is `rules`; and a stage
kept from the earlier build takes no time in the regeneration's per-stage times."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_regenerate  # noqa: E402
from bench_rehearsal import write_config  # noqa: E402

from lenses_data.config import config_from_dict  # noqa: E402
from lenses_data.stages.registry import pipeline_order  # noqa: E402
from lenses_data.stages.settings_guard import stage_inputs  # noqa: E402


def _configs(tmp_path: Path) -> tuple[dict, dict]:
    write_config(tmp_path / "c.json", tmp_path / "run", tmp_path / "pool", "http://127.0.0.1:9/v1")
    c1 = bench_regenerate.full_config(json.loads((tmp_path / "c.json").read_text()))
    return c1, bench_regenerate.lowered_config(c1)


def test_the_regeneration_config_changes_only_the_caption_maximum_so_rules_is_the_first_changed_stage(
    tmp_path,
):
    c1, c2 = _configs(tmp_path)
    full, lowered = config_from_dict(c1, environ={}), config_from_dict(c2, environ={})
    assert full.annotate.word_limits == "reject"  # a lowered maximum must drop texts, not flag them
    assert (full.annotate.caption_words.min, full.annotate.caption_words.max) == (8, 22)
    assert (lowered.annotate.caption_words.min, lowered.annotate.caption_words.max) == (8, 20)
    assert lowered.annotate.prompt_words == full.annotate.prompt_words
    assert full.models.probe is False  # the simulator's counter holds only the pipeline's calls
    changed = {}
    for stage in pipeline_order(full):
        before, after = stage_inputs(stage, full), stage_inputs(stage, lowered)
        diff = {
            k: (before.get(k), after.get(k))
            for k in before.keys() | after.keys()
            if before.get(k) != after.get(k)
        }
        if diff:
            changed[stage] = diff
    # validate and visual_validate recheck the rules on edits, so they read the maximum too
    assert next(iter(changed)) == "rules"
    assert all(diff == {"annotate.caption_words.max": (22, 20)} for diff in changed.values())


def test_stage_times_give_kept_stages_no_time_and_rebuilt_ones_the_gap_since_the_previous():
    started = 100.0
    ends = {"ingest": 50.0, "split": 101.0, "rules": 104.0, "validate": 110.0}  # ingest: the earlier build's
    times = bench_regenerate.stage_times(started, ends, ["ingest", "split", "rules", "validate", "export"])
    assert times == {"ingest": 0.0, "split": 1.0, "rules": 3.0, "validate": 6.0, "export": 0.0}
