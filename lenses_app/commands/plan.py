"""`lenses plan`: GPU-hours and wall-clock time of a build, projected from a run's journals."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="project GPU-hours per stage from a run's journals to a target candidate count",
        description="Read the run's per-shard journals (requests, prompt and completion tokens per stage) "
        "and stage markers (the funnel), scale them to --candidates at the run's or the paper's yields, "
        "and price them with a throughput table (default configs/throughput-h200.yaml). Prints a table "
        "and every assumption; --json writes the plan for the dataset card. --training-rehearsal or "
        "--training-documented adds training's wall time and GPU-hours beside the build (not in its total).",
    )
    parser.add_argument("--run", required=True, help="run directory with journal/ and stage markers")
    parser.add_argument("--candidates", type=float, help="target candidate images (default: the run's)")
    parser.add_argument(
        "--yields",
        choices=("run", "paper"),
        default=None,
        help="funnel shares: the run's, or the paper's Table 1 (105,669 of ~1M selected, 5,500 test)",
    )
    parser.add_argument("--nodes", type=int, default=4, help="GPU nodes (default 4)")
    parser.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8)")
    parser.add_argument("--throughput", help="YAML/JSON throughput table merged over the default")
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one table value, e.g. assumptions.prefill_efficiency=0.8 or "
        "models.OpenGVLab/InternVL3_5-38B-HF.gpus_per_replica=2 (repeatable)",
    )
    parser.add_argument("--filter-tiles", type=int, help="448 px tiles per filter request")
    parser.add_argument("--full-tiles", type=int, help="tiles per generation and visual-validation request")
    parser.add_argument(
        "--answers-per-image", type=int, help="answers per image and kind (annotate.candidates_per_image)"
    )
    parser.add_argument(
        "--config", help="pipeline config: its models and candidates_per_image replace the run's"
    )
    parser.add_argument(
        "--rebuild-changed",
        action="store_true",
        help="with --config (the changed config): per stage, what `lenses run --rebuild-changed` would keep, "
        "extend or rebuild and how many calls it would send or reuse, in GPU-hours at the paper's scale "
        "(1M candidates at Table 1's yields unless --candidates/--yields say otherwise)",
    )
    training = parser.add_mutually_exclusive_group()
    training.add_argument(
        "--training-rehearsal",
        metavar="FILE",
        help="add training's GPU-hours from `lenses train --rehearse --json FILE` (measured on that machine)",
    )
    training.add_argument(
        "--training-documented",
        choices=("h200", "h100"),
        help="add training's GPU-hours from the documented figures measured in 2026-11 (docs/training.md)",
    )
    parser.add_argument(
        "--training-gpus", type=int, help="GPUs of the training run (default: the rehearsal's, or 8)"
    )
    parser.add_argument(
        "--training-steps", type=int, help="optimizer steps (default: the rehearsal's, or 10,000)"
    )
    parser.add_argument(
        "--training-images-per-step",
        type=int,
        help="images per optimizer step (default: the rehearsal's, or 640)",
    )
    parser.add_argument("--json", dest="json_out", help="write the plan as JSON here ('-' for stdout)")
    parser.set_defaults(func=handle)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    from lenses_data.config import deep_merge
    from lenses_data.plan import parse_sets

    tiles: dict[str, int] = {}
    if args.filter_tiles is not None:
        tiles["filter"] = args.filter_tiles
    if args.full_tiles is not None:
        tiles.update(generator=args.full_tiles, visual_validator=args.full_tiles)
    flags = {"assumptions": {"tiles": tiles}} if tiles else {}
    return deep_merge(flags, parse_sets(args.sets))


def _training(args: argparse.Namespace) -> Any:
    from lenses_data.plan import (
        PAPER_IMAGES_PER_STEP,
        PAPER_STEPS,
        documented_training,
        training_from_rehearsal,
    )

    if args.training_rehearsal:
        return training_from_rehearsal(
            args.training_rehearsal, args.training_gpus, args.training_steps, args.training_images_per_step
        )
    if args.training_documented:
        return documented_training(
            args.training_documented,
            args.training_gpus or 8,
            args.training_steps or PAPER_STEPS,
            args.training_images_per_step or PAPER_IMAGES_PER_STEP,
        )
    return None


def handle(args: argparse.Namespace) -> int:
    from lenses_data.config.roles import ROLES
    from lenses_data.plan import PlanError, build_plan, load_table

    options: dict[str, Any] = {"answers_per_image": args.answers_per_image}
    config = None
    if args.rebuild_changed and not args.config:
        print("error: --rebuild-changed needs --config (the changed config)", file=sys.stderr)
        return 2
    if args.config:
        from lenses_data.config import ConfigError, load_config

        try:
            config = load_config(args.config)
        except ConfigError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        options["models"] = {role: config.models.role(role).model for role in ROLES}
        options["answers_per_image"] = args.answers_per_image or config.annotate.candidates_per_image
    try:
        table = load_table(args.throughput, _overrides(args))
        plan = build_plan(
            args.run,
            candidates=args.candidates or (_paper_candidates() if args.rebuild_changed else None),
            yields=args.yields or ("paper" if args.rebuild_changed else "run"),
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
            table=table,
            training=_training(args),
            **options,
        )
    except (PlanError, ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.rebuild_changed:
        return _print_regeneration(args, config, plan)
    payload = json.dumps(plan.model_dump(mode="json"), indent=2)
    if args.json_out == "-":
        print(payload)
        return 0
    print(format_plan(plan))
    if args.json_out:
        Path(args.json_out).write_text(payload + "\n", encoding="utf-8")
        print(f"\nplan JSON: {args.json_out}")
    return 0


def _paper_candidates() -> float:
    from lenses_data.config.paper import PAPER

    return float(PAPER["candidates"])


def _print_regeneration(args: argparse.Namespace, config: Any, plan: Any) -> int:
    """`--rebuild-changed`: the regeneration table (and its JSON), then the full build's plan."""
    from lenses_data.plan.regenerate import format_regeneration, priced, regeneration
    from lenses_data.stages.registry import pipeline_order
    from lenses_data.stages.settings_guard import assess_run, recorded_settings

    changed = config.model_copy(update={"run_dir": args.run})
    order = pipeline_order(changed)
    judged = assess_run(args.run, changed, order)
    stages = priced(regeneration(order, judged, recorded_settings(args.run, order), plan.run_stats), plan)
    if args.json_out:
        payload = {
            "regeneration": [s.model_dump(mode="json") for s in stages],
            "plan": plan.model_dump(mode="json"),
        }
        text = json.dumps(payload, indent=2)
        if args.json_out == "-":
            print(text)
            return 0
        Path(args.json_out).write_text(text + "\n", encoding="utf-8")
    print(format_regeneration(stages, plan))
    print()
    print(format_plan(plan))
    return 0


def _n(value: float) -> str:
    return f"{value:,.0f}"


def format_plan(plan: Any) -> str:
    """The plan as a readable table, the rates used and the assumptions."""
    f = plan.target_funnel
    kind = "simulated run" if plan.simulated_run else "run"
    lines = [
        f"lenses plan: {plan.run} ({kind}) -> {_n(plan.candidates)} candidates at {plan.yields} yields, "
        f"{plan.nodes} x {plan.gpus_per_node} {plan.gpu}",
        f"funnel: {_n(f.filter_images)} filtered, {_n(f.selected_images)} selected, "
        f"{_n(f.test_images)} test, {f.answers_per_image} answer(s) per image and kind",
        "",
        f"{'stage':<16}{'requests':>11}{'prefill tok':>15}{'tiles':>12}{'decode tok':>14}"
        f"{'prefill h':>11}{'vision h':>10}{'decode h':>10}{'GPU-h':>8}{'wall h':>8}",
    ]
    for s in plan.stages:
        lines.append(
            f"{s.stage:<16}{_n(s.requests):>11}{_n(s.prefill_tokens):>15}{_n(s.encoded_tiles):>12}"
            f"{_n(s.decode_tokens):>14}{s.prefill_gpu_hours:>11.1f}{s.vision_gpu_hours:>10.1f}"
            f"{s.decode_gpu_hours:>10.1f}{s.gpu_hours:>8.1f}{s.wall_clock_hours:>8.2f}"
        )
    lines.append(f"{'total':<16}{'':>91}{plan.total_gpu_hours:>8.1f}{plan.wall_clock_hours:>8.2f}")
    lines += ["", "rates per replica:"]
    for model, r in plan.rates.items():
        gpus = plan.table.models[model].gpus_per_replica
        vision = f", vision {r.vision_tiles_per_s:,.0f} tiles/s" if r.vision_tiles_per_s else ""
        source = f"roofline: {', '.join(r.derived)}" if r.derived else "table"
        lines.append(
            f"  {model} ({gpus} GPU): prefill {r.prefill_tokens_per_s:,.0f} tok/s{vision}, decode "
            f"{r.decode_tokens_per_s:,.0f} tok/s at ~{r.decode_batch:.0f} sequences ({source})"
        )
    lines += ["", "decode per stage (per replica):"]
    for s in plan.stages:
        if s.decode_tokens:
            lines.append(
                f"  {s.stage}: {s.decode_tokens_per_s:,.0f} tok/s at ~{s.decode_batch:.0f} sequences "
                f"(reads {s.decode_context_tokens:,.0f} KV tokens a step, holds "
                f"{s.decode_unique_tokens:,.0f} of its own)"
            )
    # Over all of a stage's prompt tokens: vLLM leaves the field out of a request that missed the
    # cache, so the share among reporting requests alone would count only the hits.
    measured = [
        f"  {name}: {st.cached / st.prompt:.0%} of prompt tokens "
        f"({st.cached_reported:,} of {st.requests:,} requests reported a hit)"
        for name, st in plan.run_stats.items()
        if st.cached_reported and st.prompt
    ]
    if measured:
        lines += [
            "",
            "prefix cache in the run (usage.prompt_tokens_details.cached_tokens; a request without it "
            "counts as a miss):",
            *measured,
        ]
    lines += ["", "assumptions:"] + [f"  - {line}" for line in plan.assumptions]
    if plan.training is not None:
        lines += ["", *format_training(plan.training, plan.total_gpu_hours)]
    return "\n".join(lines)


def format_training(t: Any, build_gpu_hours: float) -> list[str]:
    """Training beside the build: its wall time, GPU-hours and share of the two together."""
    memory = (
        f", peak {t.peak_allocated_gib:.1f} / {t.peak_reserved_gib:.1f} GiB allocated / reserved"
        if t.peak_allocated_gib is not None and t.peak_reserved_gib is not None
        else ""
    )
    share = t.gpu_hours / (t.gpu_hours + build_gpu_hours) if t.gpu_hours + build_gpu_hours else 0.0
    return [
        f"training ({t.source}):",
        f"  {t.seconds_per_micro_batch:.2f} s per {t.images_per_micro_batch}-image micro-batch on {t.card}{memory}",
        f"  {t.steps:,} steps x {t.images_per_step:,} images on {t.gpus} GPU(s) ({t.accumulation:g} micro-batches "
        f"per GPU per step): {t.wall_clock_hours:,.1f} h wall, {t.gpu_hours:,.1f} GPU-hours",
        f"  training is {share:.0%} of build + training GPU-hours ({build_gpu_hours:,.1f} for the build; "
        "cross-GPU communication not included)",
    ]
