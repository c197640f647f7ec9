"""The pipeline declared once (lenses_data/config/pipeline.py): a stage added to the declaration, with
its class defined here in the test module, is built, run and resumed by the build-dataset flow, and
shows wherever a declared stage shows; what derives from the declaration is checked against it."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from lenses_data import io
from lenses_data.config import pipeline
from lenses_data.config.pipeline import RULES, VALIDATE, FunnelStep, StageSpec
from lenses_data.schemas import LensText, Rejection
from lenses_data.stages.base import ShardedStage

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE_CONFIG = str(REPO_ROOT / "configs" / "sample.yaml")
WORD_CAP = "word_cap"
MAX_WORDS = 20


class WordCapStage(ShardedStage):
    """Reject every text of more than MAX_WORDS words (a built-in CPU stage as a test declares one)."""

    name = WORD_CAP
    output_settings = ("annotate.word_limits",)
    reads = ("text_id", "image_id", "text")
    writes = tuple(LensText.model_fields)

    def transform(self, run: Path, shard: int, frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
        long = frame["text"].str.split().str.len() > MAX_WORDS
        rows = [
            Rejection(
                stage=WORD_CAP, record_id=r.text_id, reason="over_cap", message="long", image_id=r.image_id
            )
            for r in frame[long].itertuples()
        ]
        rejected = pd.DataFrame([r.model_dump() for r in rows], columns=list(Rejection.model_fields))
        return frame[~long].reset_index(drop=True), rejected


def with_word_cap(stages: tuple[StageSpec, ...]) -> tuple[StageSpec, ...]:
    """The declaration with WordCapStage after rules: its spec, and validate reading it (the one edit
    besides the new module that a built-in CPU stage needs)."""
    cap = StageSpec(
        WORD_CAP,
        f"{__name__}:WordCapStage",
        RULES,
        "texts of at most 20 words",
        max_rejected=0.9,
        funnel=(FunnelStep("at most 20 words", "texts"),),
    )
    out: list[StageSpec] = []
    for spec in stages:
        out.append(replace(spec, input=WORD_CAP) if spec.name == VALIDATE else spec)
        if spec.name == RULES:
            out.append(cap)
    return tuple(out)


@pytest.fixture
def declared_word_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """The declaration with the word cap, for this test only: what derives at import (flows,
    commands, registry, bands) is imported first, from the declaration as shipped, so no later
    test of the session sees the extra stage."""
    import flows.build  # noqa: F401 - flows.stages: one flow per declared stage
    import lenses_app.cli
    import lenses_data.plan.build  # noqa: F401
    import lenses_data.stages.export  # noqa: F401 - export_manifest's counted stages

    lenses_app.cli.build_parser()  # the command modules register from the shipped declaration
    monkeypatch.setattr(pipeline, "BUILTIN_STAGES", with_word_cap(pipeline.BUILTIN_STAGES))


@pytest.mark.slow
def test_a_stage_added_to_the_declaration_builds_and_resumes(prefect_harness, declared_word_cap, tmp_path):
    from flows.build import build_dataset
    from lenses_data.plan.build import build_plan

    run = tmp_path / "run"
    params = {"config_path": SAMPLE_CONFIG, "run_dir": str(run), "sample": True, "simulate": True}
    first = build_dataset(**params)
    names = [s["stage"] for s in first["stages"]]
    assert names[names.index(RULES) + 1 : names.index(VALIDATE) + 1] == [WORD_CAP, VALIDATE]
    by_name = {s["stage"]: s for s in first["stages"]}
    cap = by_name[WORD_CAP]
    assert cap["rejected"] == cap["reasons"]["over_cap"] > 0 and cap["records_out"] > 0
    assert cap["records_in"] == by_name[RULES]["records_out"]
    assert by_name[VALIDATE]["records_in"] == cap["records_out"]  # validate read the new stage's rows
    assert io.stage_is_complete(run, WORD_CAP)
    settings = json.loads((run / WORD_CAP / "_SETTINGS.json").read_text())
    assert settings["inputs"] == {"annotate.word_limits": "flag"}  # guarded with its output_settings
    validated = pd.concat(pd.read_parquet(p) for p in io.stage_shards(run, VALIDATE))
    assert (validated["original_text"].str.split().str.len() <= MAX_WORDS).all()

    export = run / "export"
    manifest = json.loads((export / "manifest.json").read_text())
    assert [c["stage"] for c in manifest["counts"]] == names[:-1]  # every stage before export
    counts = json.loads((export / "card_counts.json").read_text())
    steps = [row[0] for row in counts["funnel"]["data"]]
    assert f"{WORD_CAP}: at most 20 words" in steps
    assert steps.index(f"{RULES}: rule checks passed") < steps.index(f"{WORD_CAP}: at most 20 words")
    assert "over_cap" in (export / "README.md").read_text()
    plan = build_plan(run)  # `lenses plan`: the new CPU stage is not priced, and no KeyError
    assert {s.stage for s in plan.stages} == {"filter", "generate", "validate", "visual_validate"}

    written = {p: p.stat().st_mtime_ns for p in (run / WORD_CAP).glob("part-*.parquet")}
    again = build_dataset(**params)
    for summary in again["stages"][:-1]:  # export rewrites the dataset on every build (as before)
        assert summary["shards_skipped"] == summary["shards"] > 0, summary["stage"]
    assert {s["stage"]: s["records_out"] for s in again["stages"]} == {
        s["stage"]: s["records_out"] for s in first["stages"]
    }
    assert {p: p.stat().st_mtime_ns for p in written} == written


def test_the_derived_facts_follow_the_declaration(declared_word_cap):
    """Order, inputs, bands and funnel steps of a run come from the declaration as it is now."""
    from lenses_data.config import resolve_config
    from lenses_data.config.yields import bands_of_run
    from lenses_data.publish.card_counts import declared_steps
    from lenses_data.stages.registry import build_stage, pipeline_order

    config = resolve_config(None)
    order = pipeline_order(config)
    assert order[order.index(RULES) + 1] == WORD_CAP
    assert build_stage(VALIDATE, config, with_client=False).input_stage == WORD_CAP
    assert isinstance(build_stage(WORD_CAP, config), WordCapStage)
    assert bands_of_run(config)[WORD_CAP].max_rejected == 0.9
    assert (WORD_CAP, FunnelStep("at most 20 words", "texts")) in declared_steps(pipeline.run_specs(config))


def test_the_built_in_yield_bands_are_the_declared_ones():
    from lenses_data.config.yields import YieldBands, YieldsConfig

    bands = YieldBands()
    for spec in pipeline.BUILTIN_STAGES:
        assert (bands.of(spec.name).min_rejected, bands.of(spec.name).max_rejected) == (
            spec.min_rejected,
            spec.max_rejected,
        )
    with pytest.raises(ValueError, match="word_cap"):
        YieldsConfig.model_validate({"bands": {WORD_CAP: {"max_rejected": 0.5}}})  # unknown: refused


def test_the_docs_stage_list_is_the_declaration():
    """docs/architecture.md's pipeline diagram names each declared stage, in order, with its module."""
    text = (REPO_ROOT / "docs" / "architecture.md").read_text()
    listed = re.findall(r"^  -> (\w+)\s+(\S+\.py)", text, flags=re.M)
    declared = [(s.name, s.cls.split(":")[0].replace(".", "/") + ".py") for s in pipeline.BUILTIN_STAGES]
    assert listed == declared


def test_every_declared_model_stage_is_priced_by_the_plan():
    """`lenses plan` prices the model stages declared with a plan unit (one without: test_plan.py)."""
    from lenses_data.plan import build as plan_build

    assert set(plan_build.STAGE_UNIT) == {s.name for s in pipeline.BUILTIN_STAGES if s.role}
    assert all(s.plan_unit for s in pipeline.BUILTIN_STAGES if s.role)
