"""Measure what the simulator produces through the real text stages, next to Table 1.

`run_text_stages` writes small distinct PNG images, starts the simulator, and runs the production
generate, rules, validate and visual-validate stages (their `annotate_frame`, the real model client over
HTTP on 127.0.0.1). `mix_report` summarises the result: texts per image, lens shares and mean
words by lens, plus the validators' discard and edit shares. Used by the simulator tests and by
benchmarks/bench_simulator_mix.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from lenses_data.annotation.prompts import TEXT_VALIDATION, VISUAL_VALIDATION
from lenses_data.annotation.rules import words
from lenses_data.config.annotate import AnnotateConfig
from lenses_data.schemas import LENS_NAMES


@dataclass
class StageFrames:
    images: pd.DataFrame
    generated: pd.DataFrame
    ruled: pd.DataFrame
    validated: pd.DataFrame
    final: pd.DataFrame
    rejections: dict[str, pd.DataFrame]


def write_images(folder: Path, count: int) -> pd.DataFrame:
    """`count` distinct 8x8 PNGs; every third one in the test split (visual validation's input)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(count):
        path = folder / f"img{i:05d}.png"
        Image.new("RGB", (8, 8), (i % 256, (i // 256) % 256, 77)).save(path)
        rows.append(
            {"image_id": f"img{i:05d}", "path": str(path), "split": "test" if i % 3 == 0 else "train"}
        )
    return pd.DataFrame(rows)


def run_text_stages(
    folder: Path, count: int, sim: Any = None, settings: AnnotateConfig | None = None
) -> StageFrames:
    """Generate -> rules -> validate -> visual validate over `count` images against a simulator."""
    from lenses_data.config import PipelineConfig
    from lenses_data.models.client import ModelClient
    from lenses_data.simulator.simulator import SimConfig, run_in_thread
    from lenses_data.simulator.testing import sim_models_config
    from lenses_data.stages.generate import GenerateStage
    from lenses_data.stages.rules import RulesStage
    from lenses_data.stages.validate import ValidateStage
    from lenses_data.stages.visual_validate import VisualValidateStage

    config = PipelineConfig(annotate=settings or AnnotateConfig())
    images = write_images(folder, count)
    paths = dict(zip(images["image_id"], images["path"], strict=True))
    with run_in_thread(sim or SimConfig()) as url:
        client = ModelClient(sim_models_config([url], timeout_s=30, concurrency=32))
        try:
            generated, gen_rej = GenerateStage(config, client=client).annotate_frame(images)
            ruled, rule_rej = RulesStage(config).annotate_frame(generated)
            validated, val_rej = ValidateStage(config, client=client).annotate_frame(ruled)
            final, vis_rej = VisualValidateStage(config, client=client).annotate_frame(validated, paths)
        finally:
            client.close()
    rejections = {"generate": gen_rej, "rules": rule_rej, "validate": val_rej, "visual_validate": vis_rej}
    return StageFrames(images, generated, ruled, validated, final, rejections)


def texts_summary(frame: pd.DataFrame, images: int) -> dict[str, Any]:
    """Texts per image, lens shares and mean words per lens of one kind's rows."""
    lens = frame["lens"].astype(str)
    counts = lens.value_counts()
    n_words = frame["text"].map(lambda t: len(words(t)))
    return {
        "texts": len(frame),
        "per_image": len(frame) / images if images else 0.0,
        "lens_share": {name: float(counts.get(name, 0)) / max(1, len(frame)) for name in LENS_NAMES},
        "mean_words": float(n_words.mean()) if len(frame) else 0.0,
        "mean_words_by_lens": {name: float(n_words[lens == name].mean()) for name in LENS_NAMES},
    }


def validator_shares(before: pd.DataFrame, after: pd.DataFrame, rejected: pd.DataFrame) -> dict[str, float]:
    """Of the texts a validator saw: the share it discarded and the share it edited."""
    seen = len(before)
    if not seen:
        return {"discarded": 0.0, "edited": 0.0}
    discarded = int((rejected["reason"] == "validator_discarded").sum()) if len(rejected) else 0
    old = dict(zip(before["text_id"], before["text"], strict=True))
    edited = sum(old.get(i) not in (None, t) for i, t in zip(after["text_id"], after["text"], strict=True))
    return {"discarded": discarded / seen, "edited": edited / seen}


def mix_report(frames: StageFrames) -> dict[str, Any]:
    """Per kind: generated and final texts per image, lens shares, words; validator rates."""
    report: dict[str, Any] = {"images": len(frames.images)}
    test_ids = set(frames.images.loc[frames.images["split"] == "test", "image_id"])
    for kind in ("caption", "prompt"):
        pick = {name: getattr(frames, name) for name in ("generated", "ruled", "validated", "final")}
        pick = {name: f[f["kind"] == kind] for name, f in pick.items()}
        visual_in = pick["validated"][pick["validated"]["image_id"].isin(test_ids)]
        visual_out = pick["final"][pick["final"]["image_id"].isin(test_ids)]
        report[kind] = {
            "generated": texts_summary(pick["generated"], len(frames.images)),
            "final": texts_summary(pick["final"], len(frames.images)),
            "rules_kept": len(pick["ruled"]) / max(1, len(pick["generated"])),
            TEXT_VALIDATION: validator_shares(
                pick["ruled"], pick["validated"], _of(frames.rejections["validate"], pick["ruled"])
            ),
            VISUAL_VALIDATION: validator_shares(
                visual_in, visual_out, _of(frames.rejections["visual_validate"], visual_in)
            ),
        }
    rules_rej = frames.rejections["rules"]
    report["rule_reasons"] = rules_rej["reason"].value_counts().to_dict() if len(rules_rej) else {}
    return report


def _of(rejections: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    if not len(rejections):
        return rejections
    return rejections[rejections["record_id"].isin(set(rows["text_id"]))]
