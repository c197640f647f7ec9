"""Rules stage over hand-written generated rows: one rejection per violation, duplicates, report."""

from __future__ import annotations

from lenses_data.config import PipelineConfig
from lenses_data.stages import rules as rules_stage
from lenses_data.stages.base import rejected_records
from tests.lenses_data.stages.annotate_rows import frame, lens_row

LIT = "A lone oak tree stands on a grassy hill beneath dark clouds and a wooden fence."
FIG = "Rusty wire on the leaning posts turns the fence into a house of cards awaiting wind."
EMO = "Quiet dread hangs in the heavy air as evening settles over the empty pasture."


def test_rules_stage_rejects_each_violation_and_near_duplicates():
    rows = [
        lens_row("i1", "caption", "Literal", LIT),
        lens_row("i1", "caption", "Figurative", FIG),
        lens_row("i1", "caption", "Emotional", EMO),
        lens_row("i1", "caption", "Literal", LIT.replace("beneath", "under"), candidate=1),  # near dup
        lens_row("i1", "caption", "Background", "In this image, a house of cards sits on a table."),
        lens_row("i1", "caption", "Abstract", "Caption: <text>", focus=""),
    ]
    kept, rejected = rules_stage.RulesStage(PipelineConfig()).annotate_frame(frame(rows))
    assert sorted(kept["lens"].astype(str)) == ["Emotional", "Figurative", "Literal"]
    assert list(kept.set_index("lens").loc["Figurative", "idioms"]) == ["house of cards"]
    by_text = rejected.groupby("record_id")["reason"].apply(set).to_dict()
    assert by_text[rows[3]["text_id"]] == {"near_duplicate"}
    # The idiom rules flag, they do not reject (docs/rules.md); self-reference rejects.
    assert by_text[rows[4]["text_id"]] == {"self_reference"}
    assert {"artifact_label", "artifact_placeholder", "empty_focus"} <= by_text[rows[5]["text_id"]]
    assert "word_count_low" not in by_text[rows[5]["text_id"]]  # the word limits flag by default
    assert (rejected["stage"] == "rules").all()
    # One row per reason, but the funnel counts records: 6 in = 3 out + 3 rejected.
    assert len(rejected) > 3 and rejected_records(rejected) == 3 == len(rows) - len(kept)


def test_word_limits_flag_by_default_and_reject_when_configured():
    short = "Quiet dread settles over the pasture."  # 6 words, under the captions' 8
    rows = [lens_row("i1", "caption", "Literal", LIT), lens_row("i1", "caption", "Emotional", short)]
    kept, rejected = rules_stage.RulesStage(PipelineConfig()).annotate_frame(frame(rows))
    assert rejected.empty
    assert {t: list(f) for t, f in zip(kept["text"], kept["flags"], strict=True)} == {
        LIT: [],
        short: ["word_count_low"],
    }
    strict = PipelineConfig.model_validate({"annotate": {"word_limits": "reject"}})
    kept, rejected = rules_stage.RulesStage(strict).annotate_frame(frame(rows))
    assert kept["text"].tolist() == [LIT]
    assert rejected[["record_id", "reason"]].values.tolist() == [[rows[1]["text_id"], "word_count_low"]]
    assert rejected["message"].tolist() == ["6 words; at least 8 required"]


def test_image_report_counts_idiom_target_and_lens_loss():
    given = frame(
        [
            lens_row("i1", "caption", "Literal", LIT),
            lens_row("i1", "caption", "Figurative", FIG),
            lens_row("i1", "caption", "Background", "Caption: broken"),
            lens_row("i2", "caption", "Literal", LIT),
        ]
    )
    kept, _ = rules_stage.RulesStage(PipelineConfig()).annotate_frame(given)
    report = rules_stage.image_report(given, kept, 0.4).set_index("image_id")
    assert report.loc["i1", "idiomatic"] == 1 and report.loc["i1", "idiom_target"] == 1
    assert bool(report.loc["i1", "meets_idiom_target"]) and not bool(report.loc["i2", "meets_idiom_target"])
    assert report.loc["i1", "lenses_lost"] == ["Background"]
    summary = rules_stage.summarize_report(report.reset_index())
    assert summary["caption"]["images_meeting_idiom_target"] == 1
    assert summary["caption"]["images_with_lens_lost_to_rules"] == 1


def test_shard_stats_count_rejected_records_not_rejection_rows(tmp_path):
    # One text breaks several rules (a rejection row each), another one rule: per stage and shard,
    # in = out + rejected must hold with rejected counted as distinct records, both when the
    # shard is processed and when a finished shard is read back (a resumed run's totals).
    from lenses_data import io
    from lenses_data.schemas import LensText
    from lenses_data.stages.base import run_stage

    rows = [
        lens_row("i1", "caption", "Literal", LIT),
        lens_row("i1", "caption", "Figurative", FIG),
        lens_row("i1", "caption", "Background", "In this image, a house of cards sits on a table."),
        lens_row("i1", "caption", "Abstract", "Caption: <text>", focus=""),
    ]
    io.write_shard(tmp_path, "generate", 0, frame(rows), LensText)
    io.mark_stage_complete(tmp_path, "generate", [0])
    stage = rules_stage.RulesStage(PipelineConfig(run_dir=str(tmp_path)))
    processed = stage.process_shard(tmp_path, 0)
    rows_rejected = len(io.read_rejections(tmp_path, "rules"))
    assert rows_rejected > 2  # the artifact text alone fails several rules
    recounted = stage.process_shard(tmp_path, 0)  # done: read back from its files
    assert recounted.skipped and not processed.skipped
    for stats in (processed, recounted):
        assert (stats.records_in, stats.records_out, stats.rejected) == (4, 2, 2)
        assert stats.records_in == stats.records_out + stats.rejected
        assert sum(stats.reasons.values()) == rows_rejected  # the reasons keep every row
    summary = run_stage(stage, tmp_path)
    assert (summary["records_in"], summary["records_out"], summary["rejected"]) == (4, 2, 2)
