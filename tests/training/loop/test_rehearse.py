"""`lenses train --rehearse` at tiny size on the CPU: the step runs, the report's figures agree with
each other, and a batch over the memory budget is refused with the largest batch that fits."""

from __future__ import annotations

import json
import shutil

import pytest

torch = pytest.importorskip("torch")

from training.loop.rehearsal_report import format_report, known_peak_flops, project  # noqa: E402
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
    assert m["vision_tokens"] == 6 * 2 * (16 + 1) and m["patch_tokens"] == 6 * 2 * 16
    assert m["lm_tokens"] == pytest.approx(6 * m["image_input_tokens"] + 30 * m["caption_tokens"])
    assert m["lm_padded_tokens"] > m["lm_tokens"]  # drawn prompt counts: image inputs pad to the longest
    params = report["params"]
    assert 0 < params["trainable"] < params["lm"] < params["total"] and params["vision"] > 0
    # without checkpointing (the CPU's default) nothing is recomputed: hardware = model + padding only
    breakdown, w = report["flops_breakdown"], report["matmul_weights"]
    assert breakdown["hardware"]["lm_recompute"] == 0 and not w["vision_graph"]
    lm_model = 4 * w["lm_base"] * m["lm_tokens"] + 6 * w["lora"] * m["lm_tokens"]
    assert breakdown["model"]["lm_base"] + breakdown["model"]["lora"] == pytest.approx(lm_model)
    hardware_lm = breakdown["hardware"]["lm_base"] + breakdown["hardware"]["lora"]
    assert hardware_lm == pytest.approx(lm_model * m["lm_padded_tokens"] / m["lm_tokens"])
    model, hardware = report["model_flops_per_micro_batch"], report["hardware_flops_per_micro_batch"]
    assert model == breakdown["model"]["total"] < hardware == breakdown["hardware"]["total"]
    assert report["mfu"] == pytest.approx(model / sec / 2e12)
    assert report["hfu"] == pytest.approx(hardware / sec / 2e12)
    # the tiny recipe (6 images x 2 accumulation x 8 recipe GPUs = 96 a step) kept on 4 GPUs: 4 accumulation
    assert (p["gpus"], p["steps"], p["images_per_step"], p["accumulation"]) == (4, 30, 96, 4.0)
    assert report["recipe"]["configured_images_per_step"] == 96 and report["recipe"]["source"] == "config"
    assert p["wall_hours"] == pytest.approx(30 * 4 * sec / 3600)
    assert p["gpu_hours"] == pytest.approx(p["wall_hours"] * 4)
    mem = report["memory"]
    assert mem["kind"] == "cpu" and mem["peak_allocated_bytes"] is None
    assert mem["estimated_bytes"] > mem["saved_activation_bytes"] > 0
    text = format_report(report)
    assert "the recipe's global batch is kept: 96 images per step" in text and "4 accumulation steps" in text
    assert "MFU" in text and "HFU" in text and "padding and recompute included" in text


def test_gpus_keep_the_recipe_and_another_recipe_has_its_own_flag(rehearsal_config):
    """The GPU-hours of the recipe do not depend on --gpus (only the wall time does); another
    recipe's global batch is named with images_per_step and said so."""
    on = {g: rehearse(rehearsal_config, RehearsalOptions(gpus=g), "tiny") for g in (8, 2)}
    for g, report in on.items():
        p = report["projection"]
        assert p["images_per_step"] == 96 and p["accumulation"] == 96 / (6 * g)
        assert p["gpu_hours"] == pytest.approx(30 * 16 * report["seconds_per_micro_batch"] / 3600)
    assert "as configured" in format_report(on[8])
    other = rehearse(rehearsal_config, RehearsalOptions(gpus=2, images_per_step=24), "tiny")
    assert other["projection"]["images_per_step"] == 24 and other["projection"]["accumulation"] == 2.0
    assert other["recipe"]["source"] == "--images-per-step"
    text = format_report(other)
    assert "another recipe (--images-per-step): 24 images per step, not the config's 96" in text


def test_a_model_too_large_for_the_card_is_refused_not_a_traceback(rehearsal_config):
    """The build is inside the refusal's guard: weights over the budget are a refusal naming the model."""
    report = rehearse(rehearsal_config, RehearsalOptions(memory_budget_gib=1e-4))
    assert not report["fits"] and report["largest_fitting_images_per_batch"] is None
    assert "the model itself does not fit" in report["refusal"] and "the model alone" in report["reason"]
    assert report["schema"] == "lenses-train-rehearsal/1" and report["device"] == "cpu"


def test_a_batch_over_the_budget_is_refused_with_the_largest_that_fits(rehearsal_config, tiny_retriever):
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
    # a budget just over the model alone: it is built, but not even 1 image fits
    model = tiny_retriever[0]
    static = sum(p.numel() * (p.element_size() + 4 * p.requires_grad) for p in model.parameters())
    static += sum(b.numel() * b.element_size() for b in model.buffers())
    report = rehearse(rehearsal_config, RehearsalOptions(memory_budget_gib=(static + 4096) / 1024**3))
    assert not report["fits"] and report["largest_fitting_images_per_batch"] is None
    assert "Not even 1 image fits" in report["refusal"]


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
    printed = capsys.readouterr().out
    assert "seconds per micro-batch" in printed and "the recipe's global batch is kept" in printed
    from lenses_data.plan import training_from_rehearsal  # the plan reads what the rehearsal wrote

    planned = training_from_rehearsal(out)
    assert planned.gpu_hours == pytest.approx(report["projection"]["gpu_hours"])
    assert planned.seconds_per_micro_batch == report["seconds_per_micro_batch"]
    args = build_parser().parse_args([*argv, "--rehearse", "--memory-budget-gib", "1e-6"])
    assert args.func(args) == 2
    assert "refused: the model itself does not fit" in capsys.readouterr().err  # no traceback
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
    assert known_peak_flops("NVIDIA H100 NVL") == known_peak_flops("NVIDIA H200 NVL") == 835e12
    assert known_peak_flops("cpu") is None
    with pytest.raises(ValueError):
        project(1.0, 20, 10, 640, 0)


def test_synthetic_batches_have_the_configured_shapes(tiny_retriever, tiny_config):
    from training.loop.rehearsal_batches import Shape, synthetic_batches

    processor = tiny_retriever[1]
    (typical,) = synthetic_batches(processor, tiny_config.data, True, Shape(prompts_per_image=6), 1)
    assert typical["img_slot_lens"].shape == (6, 6)  # 6 images x 6 prompts, lenses in turn
    assert typical["img_slot_lens"][0].tolist() == [0, 1, 2, 3, 4, 0]
    assert typical["txt_input_ids"].shape[0] == 6 * tiny_config.data.captions_per_image
    assert typical["pixel_values"].shape[-2:] == (32, 32)  # the processor's own tiles
    data = tiny_config.data.model_copy(update={"max_image_tokens": 4096})
    (worst,) = synthetic_batches(processor, data, True, Shape.worst_case(data), 1)
    assert worst["img_slot_lens"].shape[1] == data.max_prompts_per_image
    lengths = worst["txt_attention_mask"].sum(dim=1)  # caption inputs cut at max_caption_tokens
    assert bool((lengths == data.max_caption_tokens).all()) and worst["n_captions_truncated"] == 30
    # the default draws each image's prompts: counts differ, so image inputs pad to the longest
    (drawn,) = synthetic_batches(processor, data, True, Shape(), 1, seed=5)
    counts = (drawn["img_slot_lens"] >= 0).sum(dim=1)
    assert len(set(counts.tolist())) > 1 and bool((counts >= 1).all())
    lengths = drawn["img_attention_mask"].sum(dim=1)
    assert int(lengths.min()) < int(lengths.max()) == drawn["img_attention_mask"].shape[1]


def test_drawn_prompts_follow_the_papers_distribution():
    """Table 1's 6.93 texts per image (the simulator's model of the paper), each lens 0-3 prompts,
    lens shares as Table 1's; the draw is seeded."""
    import random
    from collections import Counter

    from lenses_data.config.simulator import table1_density, table1_lens_share
    from training.loop.rehearsal_batches import paper_prompt_lenses

    rng = random.Random(0)
    draws = [paper_prompt_lenses(rng) for _ in range(4000)]
    sizes = [len(d) for d in draws]
    assert sum(sizes) / len(sizes) == pytest.approx(table1_density(), abs=0.1)
    assert 1 <= min(sizes) and max(sizes) <= 15 and len(set(sizes)) >= 8
    lenses = Counter(lens for d in draws for lens in d)
    for k, share in enumerate(table1_lens_share().values()):
        assert lenses[k] / sum(sizes) == pytest.approx(share, abs=0.02)
    assert all(max(Counter(d).values()) <= 3 for d in draws)
    assert paper_prompt_lenses(random.Random(7)) == paper_prompt_lenses(random.Random(7))


def test_the_printed_report_of_a_cuda_rehearsal():
    """Issue 31's H200 measurement (every lever off, 6 prompts per image: no padding) through the
    new count: ~18% MFU, ~27% HFU of the H200's 989 TFLOP/s."""
    from training.loop.rehearsal_flops import MatmulWeights, TokenCounts, flops_per_micro_batch
    from training.loop.rehearsal_report import Measured, ParamCounts, format_report, report_dict

    gib = 1024**3
    params = ParamCounts(total=7_567_000_000, trainable=63_000_000, lm=7_000_000_000, vision=303_000_000)
    measured = Measured(2, 21.02, 20, 40, 65_000, 3_090, 80, 20 * 5 * 577, 65_000, 20 * 5 * 576, 6.0, 3_090)
    lm, lora = 6_979_321_856, 41_943_040
    weights = MatmulWeights(
        lm, lora, lm - 32 * 65_536, lora - 32 * 65_536, 20_971_520, 4_194_304,
        301_989_888, 289_406_976, 289_406_976 - 23 * 4_194_304, 602_112, True, 32, 32,
    )  # fmt: skip
    flops = flops_per_micro_batch(weights, TokenCounts(65_000, 65_000, 20 * 5 * 577, 20 * 5 * 576))
    memory = {"kind": "cuda", "peak_allocated_bytes": 63.5 * gib, "peak_reserved_bytes": 78.0 * gib,
              "device_total_bytes": 139.8 * gib}  # fmt: skip
    meta = {"device": "NVIDIA H200", "dtype": "bfloat16", "checkpointing": True, "warmup_micro_batches": 1}
    report = report_dict(meta, params, measured, memory, 989e12, project(10.51, 20, 10_000, 640, 8), flops)
    text = format_report(report)
    assert "seconds per micro-batch  10.510" in text and "images/s                 1.90" in text
    assert "63.5 GiB allocated, 78.0 GiB reserved of 139.8 GiB" in text
    assert f"MFU {report['mfu']:.1%} of 989 TFLOP/s" in text and 0.17 < report["mfu"] < 0.19
    assert f"HFU {report['hfu']:.1%} of 989 TFLOP/s" in text and 0.26 < report["hfu"] < 0.29
    assert "116.8 h wall, 934.2 GPU-hours" in text
    print(report["mfu"], report["hfu"], report["achieved_model_tflops"], report["achieved_hardware_tflops"])
