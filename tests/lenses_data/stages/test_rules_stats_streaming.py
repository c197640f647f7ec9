"""The rules stage's report is summed shard by shard; it must equal the report over all texts at once."""

from __future__ import annotations

import json

from lenses_data import io
from lenses_data.config import PipelineConfig
from lenses_data.schemas import LensText
from lenses_data.stages import rules as rules_stage
from lenses_data.stages.base import run_stage
from tests.lenses_data.stages.annotate_rows import frame, lens_row

TEXTS = {
    "Literal": "A lone oak tree stands on a grassy hill beneath dark clouds and a wooden fence.",
    "Figurative": "Rusty wire on the leaning posts turns the fence into a house of cards awaiting wind.",
    "Emotional": "Quiet dread hangs in the heavy air as evening settles over the empty pasture.",
    "Background": "In this image, a house of cards sits on a table.",
    "Abstract": "Caption: <text>",
}


def _shard_rows(shard: int) -> list[dict]:
    """Images whose texts differ by shard: some lose lenses to rules, some keep all five."""
    rows = []
    for image in range(3):
        image_id = f"img{shard}{image}"
        for kind in ("caption", "prompt"):
            for number, (lens, text) in enumerate(TEXTS.items()):
                if (image + number + shard) % 4 == 3:
                    continue  # this image never got a text of this lens
                clean = f"{text} Seen from shard {shard}, image {image}." if number < 3 else text
                rows.append(lens_row(image_id, kind, lens, clean if image != 1 else f"{text} {kind}"))
    return rows


def test_streamed_stats_equal_the_whole_table_report(tmp_path):
    for shard in range(3):
        io.write_shard(tmp_path, "generate", shard, frame(_shard_rows(shard)), LensText)
    io.mark_stage_complete(tmp_path, "generate", range(3))
    config = PipelineConfig()
    summary = run_stage(rules_stage.RulesStage(config), tmp_path)

    given = io.read_stage(tmp_path, "generate", LensText)
    kept = io.read_stage(tmp_path, "rules", LensText)
    report = rules_stage.image_report(given, kept, config.annotate.idiom_target_share)
    expected = {
        "idiom_rules": config.annotate.idiom_rules,
        "word_limits": config.annotate.word_limits,
        "per_kind": rules_stage.summarize_report(report),
        "flags": rules_stage.flag_counts(kept),
    }
    streamed = rules_stage.RulesStage(config).extra_stats(tmp_path)
    assert json.dumps(streamed) == json.dumps(expected)  # same values, same key order
    assert set(streamed["per_kind"]) == {"caption", "prompt"}
    assert streamed["per_kind"]["caption"]["images"] == 9
    assert streamed["per_kind"]["caption"]["images_with_lens_lost_to_rules"] > 0
    assert summary["records_in"] == len(given)
