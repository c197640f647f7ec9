"""`lenses plan`: journal statistics, scaling, overrides and the arithmetic of a plan."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lenses_app.cli import main
from lenses_data import io
from lenses_data.config import PipelineConfig
from lenses_data.models.journal import JournalEntry, ShardJournal, shard_journal_path
from lenses_data.plan import (
    PAPER,
    Plan,
    PlanError,
    build_plan,
    load_table,
    parse_sets,
    plan_for_card,
    read_stage_stats,
)

INTERNVL = "OpenGVLab/InternVL3_5-38B"
QWEN = "Qwen/Qwen2.5-32B-Instruct"
# Explicit rates, so expected hours follow from the inputs alone (no roofline).
RATES = {
    INTERNVL: {"prefill_tokens_per_s": 1000.0, "decode_tokens_per_s": 100.0, "vision_tiles_per_s": 10.0},
    QWEN: {"prefill_tokens_per_s": 2000.0, "decode_tokens_per_s": 400.0},
}


def _entry(key: str, role: str, model: str, prompt: int, completion: int, **extra) -> JournalEntry:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    fields = {"status": "ok", "raw": "x", **extra}
    return JournalEntry(hash=key, key=key, role=role, model=model, usage=usage, **fields)


def _write(run: Path, stage: str, shard: int, entries: list[JournalEntry]) -> None:
    journal = ShardJournal(shard_journal_path(run, stage, shard))
    journal.put_many(entries)
    journal.close()


@pytest.fixture
def real_run(tmp_path: Path) -> Path:
    """A run answered by real servers: 40 candidates, 10 filtered, 4 selected (2 test), 2 answers."""
    run = tmp_path / "run"
    # Filter: one tile (256 image tokens) + 44 text tokens, one answer token; over two shards.
    _write(run, "filter", 0, [_entry(f"filter:i{n}", "filter", INTERNVL, 300, 1) for n in range(6)])
    _write(run, "filter", 1, [_entry(f"filter:i{n}", "filter", INTERNVL, 300, 1) for n in range(6, 10)])
    # Generation: 4 images x 2 kinds x 2 answers; 7 tiles (1,792 tokens) + 208 text, 301 answer tokens.
    gen = [
        _entry(f"generate:i{n}:{kind}:{c}", "generator", INTERNVL, 2000, 301)
        for n in range(4)
        for kind in ("prompt", "caption")
        for c in range(2)
    ]
    _write(run, "generate", 0, gen)
    # Text validation: one batch per image and kind, 1,000 prompt and 201 answer tokens.
    val = [
        _entry(f"validate:i{n}:{kind}:5:h{n}", "validator", QWEN, 1000, 201)
        for n in range(4)
        for kind in ("prompt", "caption")
    ]
    _write(run, "validate", 0, val)
    # Visual validation of the 2 test images: 7 tiles + 500 text, 101 answer tokens.
    vis = [
        _entry(f"visual_validate:i{n}:{kind}:5:h{n}", "visual_validator", INTERNVL, 2292, 101)
        for n in range(2)
        for kind in ("prompt", "caption")
    ]
    _write(run, "visual_validate", 0, vis)
    io.mark_stage_complete(run, "ingest", [], {"accepted": 40})
    io.mark_stage_complete(run, "dedupe", [], {"images_in": 40, "images_out": 10})
    io.mark_stage_complete(run, "filter", [], {"records_in": 10, "records_out": 4})
    io.mark_stage_complete(run, "split", [], {"images": 4, "counts": {"train": 2, "valid": 0, "test": 2}})
    return run


def _table(**assumptions):
    models = {model: dict(rates) for model, rates in RATES.items()}
    return load_table(overrides={"models": models, "assumptions": assumptions})


def test_stage_stats_add_up_every_shard(real_run: Path) -> None:
    # A failed answer in another shard of the same stage counts as a request and a failure.
    failed = _entry("filter:i99", "filter", INTERNVL, 300, 1, status="failed")
    _write(real_run, "filter", 2, [failed])
    stats = read_stage_stats(real_run)
    assert set(stats) == {"filter", "generate", "validate", "visual_validate"}
    assert (stats["filter"].requests, stats["filter"].failed) == (11, 1)
    assert stats["filter"].prompt == 11 * 300
    assert stats["generate"].answers_per_image == 2
    assert stats["validate"].model == QWEN and stats["validate"].completion == 8 * 201


def test_hours_follow_from_the_inputs(real_run: Path) -> None:
    """Every stage's hours, recomputed here from the journal numbers (prefix cache off)."""
    plan = build_plan(real_run, candidates=80, table=_table(prefix_cache=False), nodes=1, gpus_per_node=2)
    got = {s.stage: s for s in plan.stages}
    k = 2  # 80 candidates is twice the run
    # filter: 10 requests -> 20; prefill 300 tokens each (44 text + 256 image), 1 tile each, no decode.
    assert got["filter"].gpu_hours == pytest.approx((20 * 300 / 1000 + 20 * 1 / 10) / 3600)
    assert got["filter"].decode_tokens == 0
    # generate: 16 -> 32 requests of 208 text + 1,792 image tokens, 7 tiles, 300 decode tokens.
    expected = (32 * 2000 / 1000 + 32 * 7 / 10 + 32 * 300 / 100) / 3600
    assert got["generate"].gpu_hours == pytest.approx(expected)
    # validate (Qwen, text only): 8 -> 16 requests of 1,000 prompt tokens, 200 decode tokens each.
    assert got["validate"].gpu_hours == pytest.approx((16 * 1000 / 2000 + 16 * 200 / 400) / 3600)
    # visual_validate: 4 -> 8 requests; 500 text + 1,792 image tokens, 7 tiles, 100 decode tokens.
    expected = (8 * (500 + 1792) / 1000 + 8 * 7 / 10 + 8 * 100 / 100) / 3600
    assert got["visual_validate"].gpu_hours == pytest.approx(expected)
    assert plan.total_gpu_hours == pytest.approx(sum(s.gpu_hours for s in plan.stages))
    # Wall clock: 2 GPUs share each stage, plus the per-stage overhead (10 min by default).
    assert got["generate"].wall_clock_hours == pytest.approx(got["generate"].gpu_hours / 2 + 10 / 60)
    assert plan.target_funnel.selected_images == pytest.approx(4 * k)


def test_prefix_cache_removes_the_template_tokens(real_run: Path) -> None:
    from lenses_data.annotation.prompts import get_template

    off = build_plan(real_run, table=_table(prefix_cache=False))
    on = build_plan(real_run, table=_table(prefix_cache=True))
    template = len(get_template("text_validation").text.split()) * 1.3
    saved = {a.stage: a.prefill_tokens - b.prefill_tokens for a, b in zip(off.stages, on.stages, strict=True)}
    # Validation prompts (1,000 tokens) are longer than the template: exactly its tokens are saved.
    assert saved["validate"] == pytest.approx(8 * template)
    # The two answers of an image and kind share one image prefill and encode.
    assert (off.stages[1].encoded_tiles, on.stages[1].encoded_tiles) == (16 * 7, 8 * 7)
    assert on.stages[1].prefill_tokens == pytest.approx(8 * 7 * 256)
    # The filter's 44 text tokens are all instructions: only the image is left to prefill.
    assert on.stages[0].prefill_tokens == pytest.approx(10 * 256)


def test_plan_scales_linearly(real_run: Path) -> None:
    table = _table()
    small = build_plan(real_run, candidates=1_000, table=table)
    large = build_plan(real_run, candidates=3_000, table=table)
    overhead = table.assumptions.stage_overhead_minutes / 60
    for a, b in zip(small.stages, large.stages, strict=True):
        assert b.gpu_hours == pytest.approx(3 * a.gpu_hours)
        assert b.requests == pytest.approx(3 * a.requests)
        assert b.wall_clock_hours - overhead == pytest.approx(3 * (a.wall_clock_hours - overhead))
    # Twice the nodes halve the wall clock of the model time, not the GPU-hours.
    wide = build_plan(real_run, candidates=3_000, table=table, nodes=8)
    assert wide.total_gpu_hours == pytest.approx(large.total_gpu_hours)
    assert wide.wall_clock_hours - 4 * overhead == pytest.approx((large.wall_clock_hours - 4 * overhead) / 2)


def test_paper_yields_and_answers_per_image(real_run: Path) -> None:
    table = _table()
    candidates = PAPER["candidates"]  # 105,669 images at the paper's 10% pass share
    plan = build_plan(real_run, candidates=candidates, yields="paper", table=table, answers_per_image=4)
    funnel = plan.target_funnel
    assert funnel.filter_images == candidates
    assert funnel.selected_images == pytest.approx(PAPER["images"])
    assert funnel.test_images == pytest.approx(PAPER["test_images"])
    got = {s.stage: s for s in plan.stages}
    # Generation: one request per image, kind and answer; validation one per image and kind.
    assert got["generate"].requests == pytest.approx(PAPER["images"] * 2 * 4)
    assert got["validate"].requests == pytest.approx(PAPER["images"] * 2)
    # Twice the answers: twice the validation decode, the same image work in visual validation.
    two = {
        s.stage: s for s in build_plan(real_run, candidates=candidates, yields="paper", table=table).stages
    }
    answered = {n: p["validate"].decode_tokens + p["validate"].requests for n, p in ((4, got), (2, two))}
    assert answered[4] == pytest.approx(2 * answered[2])
    assert got["visual_validate"].encoded_tiles == pytest.approx(two["visual_validate"].encoded_tiles)
    with pytest.raises(PlanError):
        build_plan(real_run, yields="guess", table=table)


def test_tiling_and_overrides(real_run: Path, tmp_path: Path) -> None:
    one = build_plan(real_run, table=_table(tiles={"filter": 1}, prefix_cache=False))
    seven = build_plan(
        real_run, table=_table(tiles={"filter": 7}, run_tiles={"filter": 1}, prefix_cache=False)
    )
    # Real usage holds the run's image tokens: planning 7 tiles needs run_tiles to say the run had 1.
    assert seven.stages[0].prefill_tokens == pytest.approx(10 * (44 + 7 * 256))
    assert seven.stages[0].encoded_tiles == 7 * one.stages[0].encoded_tiles
    # parse_sets keeps a model id with dots in one key; a user file changes only what it names.
    sets = parse_sets([f"models.{QWEN}.decode_tokens_per_s=800", "assumptions.prefill_efficiency=0.5"])
    assert sets["models"][QWEN]["decode_tokens_per_s"] == 800
    user = tmp_path / "mine.json"
    user.write_text(json.dumps({"gpu": {"memory_gb": 200}}))
    table = load_table(user, sets)
    default = load_table()
    assert table.gpu.memory_gb == 200 and table.gpu.bf16_flops == default.gpu.bf16_flops
    assert table.assumptions.prefill_efficiency == 0.5
    faster = build_plan(
        real_run, table=load_table(overrides={"models": {QWEN: {"decode_tokens_per_s": 800}}})
    )
    base = build_plan(real_run, table=load_table(overrides={"models": {QWEN: {"decode_tokens_per_s": 400}}}))
    assert faster.stages[2].decode_gpu_hours == pytest.approx(base.stages[2].decode_gpu_hours / 2)
    assert "decode" not in faster.rates[QWEN].derived and "prefill" in faster.rates[QWEN].derived


def test_roofline_rates_follow_the_table() -> None:
    from lenses_data.plan import model_rates

    table = load_table()
    spec, gpu, a = table.models[INTERNVL], table.gpu, table.assumptions
    rates = model_rates(spec, gpu, a)
    assert rates.prefill_tokens_per_s == pytest.approx(
        gpu.bf16_flops * a.prefill_efficiency / (2e9 * spec.llm_params_b)
    )
    # Decode grows with the KV cache a replica of two GPUs holds, per GPU too.
    two = model_rates(spec.model_copy(update={"gpus_per_replica": 2}), gpu, a)
    assert two.decode_batch > rates.decode_batch
    assert two.decode_tokens_per_s / 2 > rates.decode_tokens_per_s
    with pytest.raises(PlanError):
        model_rates(spec, gpu.model_copy(update={"memory_gb": 60}), a)


def test_plan_for_card_uses_the_config(real_run: Path) -> None:
    config = PipelineConfig.model_validate({"annotate": {"candidates_per_image": 3}})
    card = plan_for_card(real_run, config)
    plan = Plan.model_validate(card)
    assert plan.target_funnel.answers_per_image == 3
    assert json.loads(json.dumps(card))["total_gpu_hours"] == pytest.approx(plan.total_gpu_hours)


def test_cli_prints_a_table_and_writes_json(real_run: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "plan.json"
    argv = ["plan", "--run", str(real_run), "--candidates", "1000000", "--yields", "paper"]
    assert (
        main(
            argv
            + ["--filter-tiles", "2", "--set", "assumptions.stage_overhead_minutes=0", "--json", str(out)]
        )
        == 0
    )
    printed = capsys.readouterr().out
    plan = Plan.model_validate_json(out.read_text())
    assert plan.table.assumptions.tiles["filter"] == 2 and plan.table.assumptions.stage_overhead_minutes == 0
    assert f"{plan.total_gpu_hours:.1f}" in printed and "assumptions:" in printed
    assert main(["plan", "--run", str(tmp_path / "missing")]) == 2


@pytest.mark.slow
def test_plan_of_a_sample_run(tmp_path: Path) -> None:
    run = tmp_path / "sample"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    lenses = Path(sys.executable).parent / "lenses"
    subprocess.run(
        [str(lenses), "run", "--sample", "--run", str(run)], check=True, env=env, capture_output=True
    )
    out = tmp_path / "plan.json"
    argv = ["plan", "--run", str(run), "--candidates", "1000000", "--yields", "paper", "--json", str(out)]
    assert main(argv) == 0
    plan = Plan.model_validate_json(out.read_text())
    assert plan.simulated_run
    assert [s.stage for s in plan.stages] == ["filter", "generate", "validate", "visual_validate"]
    assert all(s.gpu_hours > 0 for s in plan.stages)
    assert plan.stages[0].requests == 1_000_000


def test_decode_shape_shares_the_image_between_the_answers_of_one_image() -> None:
    from lenses_data.plan.throughput import decode_shape

    # 1,792 image tokens, 1,000 cached instructions, 200 uncached, 300-token answers.
    alone = decode_shape(image=1792, cached=1000, uncached=200, answer=300, sharing=1)
    paired = decode_shape(image=1792, cached=1000, uncached=200, answer=300, sharing=2)
    assert alone == (1792 + 1000 + 200 + 150, 1792 + 200 + 300)
    assert paired[0] == alone[0]  # attention still reads the whole context of each sequence
    assert paired[1] == pytest.approx(996 + 300)  # but the KV cache holds the image once per pair


def test_generation_decode_follows_the_run_and_the_sharing(real_run: Path) -> None:
    """Roofline decode (no explicit rate): the answers of one image decoded side by side hold the
    image once, so more sequences fit and decode is faster than when each holds its own."""
    roofline = {INTERNVL: {"decode_tokens_per_s": None}, QWEN: {"decode_tokens_per_s": None}}

    def generate(**assumptions) -> object:
        table = load_table(overrides={"models": roofline, "assumptions": assumptions})
        plan = build_plan(real_run, candidates=1e6, yields="paper", table=table)
        return next(s for s in plan.stages if s.stage == "generate"), plan

    shared, plan = generate()
    apart, _ = generate(share_candidate_prefix=False)
    reference, ref_plan = generate(decode_from_run=False)
    # The run: 2,000 prompt tokens a request, 1,792 of them the image; 301-token answers; 2 answers.
    assert shared.decode_unique_tokens < apart.decode_unique_tokens
    assert shared.decode_batch > apart.decode_batch
    assert shared.decode_tokens_per_s > apart.decode_tokens_per_s
    assert shared.decode_gpu_hours < apart.decode_gpu_hours
    # Off: every stage uses the model's reference sequence from the table.
    assert reference.decode_tokens_per_s == pytest.approx(ref_plan.rates[INTERNVL].decode_tokens_per_s)
    assert reference.decode_unique_tokens == load_table().models[INTERNVL].decode_unique_tokens


def test_measured_prefix_cache_use_is_summed_and_printed(real_run: Path) -> None:
    from lenses_app.commands.plan import format_plan

    # A second generate shard whose server reported cached tokens (vLLM's prompt_tokens_details).
    usage = {"prompt_tokens": 2000, "completion_tokens": 301, "total_tokens": 2301, "cached_tokens": 1500}
    entries = [
        JournalEntry(hash=f"g{n}", key=f"generate:j{n}:caption:0", role="generator", model=INTERNVL,
                     usage=usage, status="ok", raw="x")
        for n in range(4)
    ]  # fmt: skip
    _write(real_run, "generate", 1, entries)
    stats = read_stage_stats(real_run)
    assert (stats["generate"].cached, stats["generate"].cached_reported) == (6000, 4)
    assert stats["filter"].cached_reported == 0
    text = format_plan(build_plan(real_run, table=_table()))
    # The other 16 requests reported nothing, which vLLM does for a miss: they count as 0 cached,
    # so the share is below the 75% of the four that reported.
    share = 6000 / stats["generate"].prompt
    assert share < 0.75
    assert f"generate: {share:.0%} of prompt tokens (4 of 20 requests reported a hit)" in text


def test_a_model_stage_without_a_plan_unit_is_named_not_a_key_error(real_run: Path, monkeypatch) -> None:
    """A model stage declared without `plan_unit` (a new one, before its plan entry): the plan prices
    the others and says which stage it left out (it was a KeyError in `stage_scale`)."""
    from lenses_data.plan import build as plan_build

    unit = {k: v for k, v in plan_build.STAGE_UNIT.items() if k != "visual_validate"}
    monkeypatch.setattr(plan_build, "STAGE_UNIT", unit)
    plan = build_plan(real_run, table=_table())
    assert [s.stage for s in plan.stages] == ["filter", "generate", "validate"]
    assert any(
        line.startswith("visual_validate: a model stage declared without") for line in plan.assumptions
    )
