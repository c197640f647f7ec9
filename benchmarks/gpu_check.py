"""The GPU check: every GPU figure of issue 42 in one command, on one lent GPU, in ~8 minutes,
with no network. `make gpu-check` runs it; docs/training.md#the-gpu-check says what to carry.

    python benchmarks/gpu_check.py --out DIR                 # one CUDA GPU, production size
    python benchmarks/gpu_check.py --tiny --out DIR          # CPU, tiny model (what the tests run)

In order, each item only if the time budget (--budget-s, default 450 s) still has room for it (an
item's estimate: the last rehearsal's duration for a rehearsal), else recorded as skipped with
the reason; an item that fails is recorded with its error and the next one runs:

1. model_dir: the production-shaped model directory (training.dryrun.production_shape: BGE-VL-
   MLLM-S1's config and processor, no weights; the rehearsal builds random bf16 weights on the card)
2. rehearsal_shipped: `lenses train --rehearse` of training/configs/h200x8.yaml as shipped
3. rehearsal_levers_off: the same with every `speed.*` lever off (issue 31's measured baseline)
4. profile: one training step as shipped under torch.profiler (benchmarks/gpu_profile.py)
5. clip: the dedupe stage's CLIP path, `embed_images` end to end against the encoder alone, bf16
   (benchmarks/bench_clip_embed.py's measurement; ViT-L-14, random weights, the sample pool's JPEGs)
6. lever_*: levers off plus one lever, each timed over one micro-batch (the recipe's global
   batch kept for the projection), as long as time allows; compile_layers last (estimated at
   >= 120 s: inductor compiles 32 decoder layers)

--tiny: the tiny CPU model (training/configs/tiny.yaml with checkpointing and vision_no_grad on,
as the production recipe ships them), the small CLIP of bench_clip_embed, a few images, no
compile_layers (minutes of compiling on a CPU), checkpoint_skip_last=1 (2 layers). --items runs a
subset.
Writes DIR/gpu_check.json (schema lenses-gpu-check/1) and DIR/gpu_check.md.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_check_report import write_outputs  # noqa: E402

# Python packages a bare GPU machine with torch may lack (docs/training.md#the-gpu-check).
NEEDED_MODULES = ("pydantic", "pydantic_core", "annotated_types", "typing_inspection", "open_clip", "ftfy",
                  "wcwidth", "transformers", "peft", "yaml", "PIL", "numpy")  # fmt: skip
LEVERS = {
    "vision_no_grad": {"vision_no_grad": True},
    "lora_no_input_cast": {"lora_no_input_cast": True},
    "length_chunks=2": {"length_chunks": 2},
    "checkpoint_skip_last=4": {"checkpoint_skip_last": 4},
    "compile_layers": {"compile_layers": True},
}


@dataclass
class Item:
    name: str
    estimate_s: Callable[[], float]
    run: Callable[[], dict]


def run_items(items: list[Item], budget_s: float, clock=time.perf_counter, after=lambda: None) -> dict:
    """Run the items in order while the budget has room for each one's estimate."""
    start, results = clock(), {}
    for item in items:
        left, need = budget_s - (clock() - start), item.estimate_s()
        if need > left:
            reason = (
                f"time budget: {max(left, 0):.0f} s left of {budget_s:.0f} s, this item needs ~{need:.0f} s"
            )
            results[item.name] = {"status": "skipped", "reason": reason}
            continue
        began = clock()
        try:
            results[item.name] = {"status": "ok", "result": item.run()}
        except Exception as error:  # one failing item must not cost the others their figures
            results[item.name] = {"status": "failed", "error": f"{type(error).__name__}: {error}"[:2000]}
        results[item.name]["seconds"] = round(clock() - began, 2)
        after()
    return results


def missing_modules() -> list[str]:
    import importlib.util

    return [name for name in NEEDED_MODULES if importlib.util.find_spec(name) is None]


class Check:
    """The state the items share: the config, the model directory, the last rehearsal's duration."""

    def __init__(self, args):
        import torch

        self.args, self.torch = args, torch
        self.work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
        self.device = "cpu" if args.tiny else "cuda"
        if not args.tiny and not torch.cuda.is_available():
            raise SystemExit("gpu_check: no CUDA device (use --tiny on the CPU)")
        self.model_dir: Path | None = None
        self.rehearsal_s = 8.0 if args.tiny else 75.0  # first estimate; then the last one measured

    def config(self, speed: dict | None = None, accum: int | None = None):
        from training.retriever.config import load_train_config

        overrides: dict = {"run": {"out_dir": str(self.work / "run")}, "model": {"source": "local"}}
        overrides["model"]["path"] = str(self.model_dir) if self.model_dir else None
        if self.args.tiny:
            overrides["run"].update(gradient_checkpointing=True)
            overrides["speed"] = {"vision_no_grad": True}
        cfg = load_train_config("tiny" if self.args.tiny else self.args.config, overrides)
        if speed is not None:  # levers off, plus the named ones
            cfg = cfg.model_copy(update={"speed": type(cfg.speed)(**speed)})
        if accum is not None:
            cfg = cfg.model_copy(update={"optim": cfg.optim.model_copy(update={"accum_steps": accum})})
        return cfg

    def build_model_dir(self) -> dict:
        from training.loop.rehearsal_batches import FILLER

        texts = [" ".join(FILLER)]
        if self.args.tiny:
            from training.dryrun.tiny import materialize_tiny_base

            self.model_dir = materialize_tiny_base(self.work / "tiny-base", texts, self.config().model.tiny)
        else:
            from training.dryrun.production_shape import write_production_shaped_dir

            self.model_dir = write_production_shaped_dir(self.work / "bgevl-shape", texts)
        return {"path": str(self.model_dir), "files": sorted(p.name for p in self.model_dir.iterdir())}

    def rehearsal(self, speed: dict | None, one_micro_batch: bool = False) -> dict:
        from training.loop.rehearse import RehearsalOptions, recipe_of, rehearse

        cfg = self.config(speed)
        opts = RehearsalOptions(gpus=8, peak_tflops=self.args.peak_tflops)
        if one_micro_batch:  # a lever's timing over one micro-batch; the recipe's global batch kept
            opts.images_per_step = recipe_of(cfg, opts)["configured_images_per_step"]
            cfg = self.config(speed, accum=1)
        began = time.perf_counter()
        report = rehearse(cfg, opts, "tiny" if self.args.tiny else self.args.config)
        self.rehearsal_s = time.perf_counter() - began
        return report

    def profile(self) -> dict:
        from gpu_profile import profile_step

        from training.loop.rehearsal_batches import Shape

        return profile_step(self.config(), self.model_dir, self.torch.device(self.device), Shape())

    def clip(self) -> dict:
        import bench_clip_embed as bench

        model = "bench-small" if self.args.tiny else "ViT-L-14"
        args = argparse.Namespace(device=self.device, model=model, batch=None, workers=0,
                                  images=16 if self.args.tiny else 2048)  # fmt: skip
        return clip_rates(bench, args, repeats=1 if self.args.tiny else 2)

    def release(self) -> None:
        gc.collect()
        if self.device == "cuda":
            self.torch.cuda.empty_cache()


def clip_rates(bench, args, repeats: int) -> dict:
    """embed_images' loop end to end and the encoder alone, at the plan's precision and batch."""
    from lenses_data.dedupe.clip_embed import embed_with_model

    model, preprocess, plan = bench.build(args)
    paths = bench.jpeg_pool(Path(tempfile.mkdtemp()), args.images)
    embed_with_model(paths[: plan.batch_size], model, preprocess, plan)  # warm-up
    runs = []
    for _ in range(repeats):
        end_to_end = bench.timed(lambda: len(embed_with_model(paths, model, preprocess, plan)[0]))
        encoder = bench.encoder_rate(model, args.device, plan.batch_size, plan.precision, 5)
        runs.append({"end_to_end_images_per_s": end_to_end, "encoder_images_per_s": encoder})
    best = max(runs, key=lambda r: r["end_to_end_images_per_s"])
    return {"model": args.model, "images": len(paths), "precision": plan.precision, "batch": plan.batch_size,
            "decode_workers": plan.decode_workers, **best,
            "end_to_end_vs_encoder": best["end_to_end_images_per_s"] / best["encoder_images_per_s"],
            "runs": runs}  # fmt: skip


def items_of(check: Check) -> list[Item]:
    last = lambda: check.rehearsal_s  # noqa: E731
    lever_s = lambda: check.rehearsal_s * (0.5 if check.args.tiny else 0.45)  # noqa: E731
    items = [
        Item("model_dir", lambda: 2.0 if check.args.tiny else 10.0, check.build_model_dir),
        Item("rehearsal_shipped", last, lambda: check.rehearsal(None)),
        Item("rehearsal_levers_off", last, lambda: check.rehearsal({})),
        Item("profile", lambda: 4.0 if check.args.tiny else 45.0, check.profile),
        Item("clip", lambda: 10.0 if check.args.tiny else 60.0, check.clip),
    ]
    for name, speed in LEVERS.items():
        if check.args.tiny and name == "compile_layers":
            continue  # minutes of inductor compilation on a CPU: measured on the GPU only
        if check.args.tiny and name.startswith("checkpoint_skip_last"):
            name, speed = "checkpoint_skip_last=1", {"checkpoint_skip_last": 1}  # the tiny model has 2 layers
        estimate = (lambda: max(120.0, lever_s() * 3)) if name == "compile_layers" else lever_s
        items.append(
            Item(f"lever_{name}", estimate, lambda s=speed: check.rehearsal(s, one_micro_batch=True))
        )
    wanted = check.args.items.split(",") if check.args.items else None
    return [item for item in items if wanted is None or item.name in wanted]


def machine(check: Check) -> dict:
    torch = check.torch
    info = {"python": platform.python_version(), "torch": torch.__version__, "cpu_cores": os.cpu_count(),
            "host": platform.machine(), "device": check.device}  # fmt: skip
    if check.device == "cuda":
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 1024**3, 1))
    return info


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="runs/gpu-check", help="folder for gpu_check.json and gpu_check.md")
    parser.add_argument("--tiny", action="store_true", help="the tiny model on the CPU (the tests' mode)")
    parser.add_argument(
        "--budget-s", type=float, default=450.0, help="time budget of all items (default 450)"
    )
    parser.add_argument(
        "--config", default=str(ROOT / "training/configs/h200x8.yaml"), help="training config"
    )
    parser.add_argument(
        "--peak-tflops", type=float, help="the card's dense bf16 peak, if its name is not known"
    )
    parser.add_argument("--items", help="comma-separated item names to run (default: all, in order)")
    args = parser.parse_args(argv)
    missing = missing_modules()
    if missing:
        print(f"gpu_check: missing Python packages: {', '.join(missing)} (make gpu-wheels; docs/training.md)")
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    started = datetime.now(UTC)
    check = Check(args)
    results = run_items(items_of(check), args.budget_s, after=check.release)
    report = {"schema": "lenses-gpu-check/1", "started_at": started.isoformat(timespec="seconds"),
              "mode": "tiny" if args.tiny else "production", "budget_s": args.budget_s,
              "machine": machine(check), "command": " ".join(sys.argv), "items": results}  # fmt: skip
    json_path, md_path = write_outputs(report, Path(args.out))
    print(md_path.read_text())
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
