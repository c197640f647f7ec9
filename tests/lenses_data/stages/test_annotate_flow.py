"""filter -> generate -> rules -> validate -> visual-validate -> export on real sample images,
with the real model client talking to the simulator over HTTP on 127.0.0.1.

Ingest is the real stage (session fixture `ingested_run`); dedupe (pHash only) and split are the
real stages too, run in the default order ingest -> dedupe -> filter -> split -> generate.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from lenses_app.cli import main
from lenses_data import io
from lenses_data.config import config_from_dict
from lenses_data.config.models import ROLES
from lenses_data.models.client import ModelClient
from lenses_data.schemas import LENS_NAMES, LensText
from lenses_data.simulator.simulator import SimConfig, run_in_thread
from lenses_data.stages.base import run_stage
from lenses_data.stages.dedupe import DedupeStage
from lenses_data.stages.export import ExportStage
from lenses_data.stages.filter import FilterStage
from lenses_data.stages.generate import GenerateStage
from lenses_data.stages.rules import RulesStage
from lenses_data.stages.split import SplitStage
from lenses_data.stages.validate import ValidateStage
from lenses_data.stages.visual_validate import VisualValidateStage

STAGES = [
    DedupeStage,
    FilterStage,
    SplitStage,
    GenerateStage,
    RulesStage,
    ValidateStage,
    VisualValidateStage,
    ExportStage,
]
TEXT_COLUMNS = [
    "text_id",
    "image_id",
    "split",
    "lens",
    "text",
    "focus",
    "idioms",
    "edited",
    "original_text",
    "prompt_hash",
    "model",
    "simulated",
    "flags",
]


def _config(url: str, run: Path):
    roles = {role: {"model": f"test/{role}", "base_urls": [url], "timeout_s": 5} for role in ROLES}
    return config_from_dict(
        {
            "run_dir": str(run),
            "models": {**roles, "retry": {"backoff_base_s": 0.001, "backoff_max_s": 0.01}},
            # Simulated sentences share filler words; a lenient overlap threshold keeps some texts.
            "annotate": {"candidates_per_image": 2, "max_ngram_similarity": 0.95, "max_items_per_answer": 6},
            "split": {"test": 0.34, "valid": 0.1},
        },
        environ={},
    )


def _run_all(config, run: Path) -> dict[str, dict]:
    client = ModelClient.from_config(config.models, journal_dir=run / "journal")
    try:
        stages = [
            cls(config) if cls in (DedupeStage, SplitStage, ExportStage) else cls(config, client=client)
            for cls in STAGES
        ]
        return {stage.name: run_stage(stage, run) for stage in stages}
    finally:
        client.close()


def _ids(run: Path, stage: str) -> set[str]:
    return set(io.read_stage(run, stage, LensText)["text_id"])


def _rejected_export(out: Path) -> set[str]:
    rejections = pd.read_parquet(out / "rejections.parquet")
    return set(rejections.loc[rejections["stage"] == "export", "record_id"])


def _rejected(run: Path, stage: str) -> set[str]:
    return set(io.read_rejections(run, stage)["record_id"])


@pytest.mark.slow
def test_annotation_stages_over_http(ingested_run: Path, tmp_path: Path):
    run = tmp_path / "run"
    shutil.copytree(ingested_run, run)
    with run_in_thread(SimConfig(yes_rate=0.7, seed=3)) as url:
        config = _config(url, run)
        summaries = _run_all(config, run)

        # filter: every dedupe survivor decided or rejected; the pass rate is reported
        decisions = io.read_stage(run, "filter")
        survivors = io.read_stage(run, "dedupe")
        assert set(decisions["image_id"]) | _rejected(run, "filter") == set(
            survivors.loc[survivors["kept"], "image_id"]
        )
        assert summaries["filter"]["decided"] == len(decisions) > 0
        assert 0 < summaries["filter"]["pass_rate"] < 1
        # generate: exactly the images the filter passed and the split assigned
        assigned = set(io.read_stage(run, "split")["image_id"])
        assert assigned == set(decisions.loc[decisions["passed"], "image_id"])
        assert (
            set(io.read_stage(run, "generate")["image_id"])
            | set(io.read_rejections(run, "generate")["image_id"])
            == assigned
        )

        # nothing disappears silently between text stages
        generated = _ids(run, "generate")
        assert generated
        assert generated == _ids(run, "rules") | _rejected(run, "rules")
        assert _ids(run, "rules") == _ids(run, "validate") | _rejected(run, "validate")
        assert _ids(run, "validate") == _ids(run, "visual_validate") | _rejected(run, "visual_validate")
        assert summaries["rules"]["reasons"], "simulated answers exercise at least one rule"

        # export: typed tables, manifest, card
        out = run / "export"
        captions = pd.read_parquet(out / "captions.parquet")
        prompts = pd.read_parquet(out / "prompts.parquet")
        images = pd.read_parquet(out / "images.parquet")
        assert list(captions.columns) == TEXT_COLUMNS and list(prompts.columns) == TEXT_COLUMNS
        assert isinstance(captions["lens"].dtype, pd.CategoricalDtype)
        assert list(captions["lens"].cat.categories) == list(LENS_NAMES)
        assert list(images["split"].cat.categories) == ["train", "valid", "test"]
        assert set(captions["image_id"]) | set(prompts["image_id"]) == set(images["image_id"])
        assert set(images["image_id"]) | _rejected_export(out) == assigned
        assert "test" in set(images["split"])
        assert captions["simulated"].all() and all(
            Path(p).is_absolute() and Path(p).exists() for p in images["path"]
        )
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["simulated"] is True
        assert set(manifest["prompt_hashes"]) == {
            "filter",
            "image_side_prompts",
            "captions",
            "text_validation",
            "visual_validation",
        }
        assert set(captions["prompt_hash"]) <= set(manifest["prompt_hashes"].values())
        card = (out / "README.md").read_text()
        assert "SIMULATED" in card and "Funnel" in card and "![lens distribution]" in card
        for name in ("lens_distribution", "captions_per_image", "prompts_per_image"):
            assert (out / "figures" / f"{name}.png").stat().st_size > 1000
        rejections = pd.read_parquet(out / "rejections.parquet")
        assert {"filter", "rules"} <= set(rejections["stage"])

        # a rerun skips every finished shard and changes nothing
        before = captions.copy()
        again = _run_all(config, run)
        assert again["generate"]["shards_skipped"] == again["generate"]["shards"]
        assert again["generate"]["records_out"] == summaries["generate"]["records_out"]
        pd.testing.assert_frame_equal(pd.read_parquet(out / "captions.parquet"), before)

    # the commands: a finished stage reruns as a no-op; export writes anywhere with --out
    assert main(["rules", "--run", str(run)]) == 0
    assert main(["export", "--run", str(run), "--out", str(tmp_path / "elsewhere")]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "elsewhere" / "captions.parquet"), before)
    assert main(["generate", "--run", str(tmp_path / "missing")]) == 2


@pytest.mark.slow
def test_filter_command_with_simulator(ingested_run: Path, tmp_path: Path, capsys):
    run = tmp_path / "run"
    shutil.copytree(ingested_run, run)
    run_stage(DedupeStage(config_from_dict({}, environ={})), run)
    assert main(["filter", "--run", str(run), "--simulate"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["decided"] == len(io.read_stage(run, "filter")) > 0
    assert io.read_stage(run, "filter")["simulated"].all()
