"""`lenses train --rehearse` at tiny size on the CPU: the step runs, the report's figures agree with
each other, and a batch over the memory budget is refused with the largest batch that fits."""

from __future__ import annotations

import json
import shutil

import pytest

torch = pytest.importorskip("torch")

from training.loop.rehearsal_report import known_peak_flops, project  # noqa: E402
from training.loop.rehearse import RehearsalOptions, rehearse  # noqa: E402


@pytest.fixture()
def config_only_dir(tiny_base, tmp_path):
    """The tiny model directory without its weight files: config.json and the processor only."""
    out = tmp_path / "config-only"
    shutil.copytree(tiny_base, out, ignore=shutil.ignore_patterns("*.safetensors", "*.bin"))
    assert not list(out.glob("*.safetensors"))
    return out


@pytest.fixture()
def rehearsal_config(tiny_config, config_only_dir):
    tiny_config.model.path = str(config_only_dir)
    tiny_config.optim.accum_steps = 2  # two timed micro-batches, one optimizer step
    return tiny_config


def test_report_figures_are_consistent(rehearsal_config, tiny_retriever):
    report = rehearse(rehearsal_config, RehearsalOptions(gpus=4, peak_tflops=2.0), "tiny")
    assert report["fits"] and report["random_weights"] and report["checkpointing"] is False  # CPU default
    # random weights from config.json alone: the same network as the one loaded from the weights
    assert report["params"]["total"] == sum(p.numel() for p in tiny_retriever[0].parameters())
    m, p = report["measured"], report["projection"]
    sec = report["seconds_per_micro_batch"]
    assert m["micro_batches"] == 2 and sec == pytest.approx(m["seconds"] / 2)
    assert m["images_per_batch"] == 6 and m["captions_per_batch"] == 6 * 5
    assert report["images_per_s"] == pytest.approx(6 / sec)
    assert report["tokens_per_s"] == pytest.approx(m["lm_tokens"] / sec)
    # 32 px images with 32 px tiles: the processor's anyres gives 1 tile + the base image, 16 patches + CLS
    assert m["vision_tokens"] == 6 * 2 * (16 + 1)
    assert m["lm_tokens"] == pytest.approx(6 * m["image_input_tokens"] + 30 * m["caption_tokens"])
    params = report["params"]
    assert 0 < params["trainable"] < params["lm"] < params["total"] and params["vision"] > 0
    flops = 6 * params["lm"] * m["lm_tokens"] + 2 * params["vision"] * m["vision_tokens"]
    assert report["flops_per_micro_batch"] == pytest.approx(flops)
    assert report["mfu"] == pytest.approx(flops / sec / 2e12)
    # the tiny recipe on 4 GPUs: 30 steps x (6 images x 2 accumulation x 4 GPUs)
    assert (p["gpus"], p["steps"], p["images_per_step"], p["accumulation"]) == (4, 30, 48, 2.0)
    assert p["wall_hours"] == pytest.approx(30 * 2 * sec / 3600)
    assert p["gpu_hours"] == pytest.approx(p["wall_hours"] * 4)
    mem = report["memory"]
    assert mem["kind"] == "cpu" and mem["peak_allocated_bytes"] is None
    assert mem["estimated_bytes"] > mem["saved_activation_bytes"] > 0


def test_a_batch_over_the_budget_is_refused_with_the_largest_that_fits(rehearsal_config):
    rehearsal_config.optim.accum_steps = 1
    estimates = {}
    for images in (6, 3):
        rehearsal_config.data.images_per_batch = images
        estimates[images] = rehearse(rehearsal_config, RehearsalOptions())["memory"]["estimated_bytes"]
    assert estimates[3] < estimates[6]
    rehearsal_config.data.images_per_batch = 6
    budget = (estimates[3] + estimates[6]) / 2 / 1024**3
    report = rehearse(rehearsal_config, RehearsalOptions(memory_budget_gib=budget))
    assert not report["fits"] and report["largest_fitting_images_per_batch"] == 3
    assert "3 images per micro-batch" in report["refusal"] and "in-batch negatives" in report["refusal"]
    tiny = rehearse(rehearsal_config, RehearsalOptions(memory_budget_gib=1e-6))
    assert not tiny["fits"] and tiny["largest_fitting_images_per_batch"] is None


def test_cli_rehearse_writes_json_and_exits_2_when_refused(
    rehearsal_config, config_only_dir, tmp_path, capsys
):
    from lenses_app.cli import build_parser

    out = tmp_path / "rehearsal.json"
    argv = ["train", "--config", "tiny", "--model-path", str(config_only_dir), "--out", str(tmp_path / "r")]
    args = build_parser().parse_args([*argv, "--rehearse", "--gpus", "2", "--json", str(out)])
    args.config = str(tmp_path / "checkpointed.yaml")  # the config's checkpointing is the rehearsal's
    (tmp_path / "checkpointed.yaml").write_text("extends: tiny\nrun: {gradient_checkpointing: true}\n")
    assert args.func(args) == 0
    report = json.loads(out.read_text())
    assert report["checkpointing"] is True and report["fits"]
    assert report["schema"] == "lenses-train-rehearsal/1" and report["projection"]["gpus"] == 2
    assert "seconds per micro-batch" in capsys.readouterr().out
    from lenses_data.plan import training_from_rehearsal  # the plan reads what the rehearsal wrote

    planned = training_from_rehearsal(out)
    assert planned.gpu_hours == pytest.approx(report["projection"]["gpu_hours"])
    assert planned.seconds_per_micro_batch == report["seconds_per_micro_batch"]
    args = build_parser().parse_args([*argv, "--rehearse", "--memory-budget-gib", "1e-6"])
    assert args.func(args) == 2
    assert "refused: 6 images per micro-batch do not fit" in capsys.readouterr().err
    args = build_parser().parse_args([*argv[:3], "--model-path", str(tmp_path / "missing"), "--rehearse"])
    args.config = str(tmp_path / "checkpointed.yaml")
    (tmp_path / "checkpointed.yaml").write_text("extends: tiny\nmodel: {source: local}\n")
    assert args.func(args) == 2 and "config.json" in capsys.readouterr().err


def test_projection_of_the_paper_recipe_and_known_peaks():
    # the figures of issue 31: 10.51 s per 20-image micro-batch on H200, 10,000 steps x 640 images
    h200 = project(10.51, 20, 10_000, 640, 8)
    assert h200.accumulation == 4 and h200.wall_hours == pytest.approx(116.8, abs=0.1)
    assert h200.gpu_hours == pytest.approx(934.2, abs=0.1)
    assert project(10.51, 20, 10_000, 640, 4).wall_hours == pytest.approx(2 * h200.wall_hours)
    assert known_peak_flops("NVIDIA H100 PCIe") == 756e12
    assert known_peak_flops("NVIDIA H100 80GB HBM3") == known_peak_flops("NVIDIA H200") == 989e12
    assert known_peak_flops("cpu") is None
    with pytest.raises(ValueError):
        project(1.0, 20, 10, 640, 0)


def test_synthetic_batches_have_the_configured_shapes(tiny_retriever, tiny_config):
    from training.loop.rehearsal_batches import Shape, synthetic_batches

    processor = tiny_retriever[1]
    (typical,) = synthetic_batches(processor, tiny_config.data, True, Shape(), 1)
    assert typical["img_slot_lens"].shape == (6, 6)  # 6 images x 6 prompts, lenses in turn
    assert typical["img_slot_lens"][0].tolist() == [0, 1, 2, 3, 4, 0]
    assert typical["txt_input_ids"].shape[0] == 6 * tiny_config.data.captions_per_image
    assert typical["pixel_values"].shape[-2:] == (32, 32)  # the processor's own tiles
    data = tiny_config.data.model_copy(update={"max_image_tokens": 4096})
    (worst,) = synthetic_batches(processor, data, True, Shape.worst_case(data), 1)
    assert worst["img_slot_lens"].shape[1] == data.max_prompts_per_image
    lengths = worst["txt_attention_mask"].sum(dim=1)  # caption inputs cut at max_caption_tokens
    assert bool((lengths == data.max_caption_tokens).all()) and worst["n_captions_truncated"] == 30


def test_the_printed_report_of_a_cuda_rehearsal():
    from training.loop.rehearsal_report import Measured, ParamCounts, format_report, report_dict

    gib = 1024**3
    params = ParamCounts(total=7_567_000_000, trainable=63_000_000, lm=7_000_000_000, vision=303_000_000)
    measured = Measured(2, 21.02, 20, 40, 65_000, 3_090, 80, 20 * 5 * 577)
    memory = {"kind": "cuda", "peak_allocated_bytes": 63.5 * gib, "peak_reserved_bytes": 78.0 * gib,
              "device_total_bytes": 139.8 * gib}  # fmt: skip
    meta = {"device": "NVIDIA H200", "dtype": "bfloat16", "checkpointing": True, "warmup_micro_batches": 1}
    report = report_dict(meta, params, measured, memory, 989e12, project(10.51, 20, 10_000, 640, 8))
    text = format_report(report)
    assert "seconds per micro-batch  10.510" in text and "images/s                 1.90" in text
    assert "63.5 GiB allocated, 78.0 GiB reserved of 139.8 GiB" in text
    assert f"MFU {report['mfu']:.1%} of 989 TFLOP/s" in text and 0.25 < report["mfu"] < 0.29
    assert "116.8 h wall, 934.2 GPU-hours" in text
