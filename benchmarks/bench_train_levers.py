"""Training-step speed levers (`speed.*`), each on and off against the baseline in one process.

    # CPU, tiny random model (a few minutes on 2 cores)
    python benchmarks/bench_train_levers.py --device cpu --size tiny --images 6 --write /tmp/levers.md
    # GPU, production size: BGE-VL-MLLM-S1's config and processor files, random bf16 weights built
    # on the card (no weight files needed), the h200x8 recipe's 20 images x 2 captions
    python benchmarks/bench_train_levers.py --device cuda --size production \\
        --model-dir /models/BAAI/BGE-VL-MLLM-S1 --images 20 --skip-last 2 --write /tmp/levers.md

Each variant builds a fresh retriever (levers change the model object) with activation
checkpointing on, as the recipe runs it, and times forward + backward of the same synthetic
micro-batches (the processor's real tiling, prompts and captions of seeded random lengths) after
warm-up (the median). On a GPU the variants run one after another, each built fresh, with the
CUDA allocator's peak allocated / reserved memory; on the CPU they are timed round-robin
(`--rounds`) and memory is not compared. The first micro-batch's loss is printed for every
variant: the levers keep the recipe, so it should agree.
"""

from __future__ import annotations

import argparse
import copy
import gc
import platform
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training.loop.inputs import Collator, to_device  # noqa: E402
from training.retriever.build import assemble_retriever, build_retriever  # noqa: E402
from training.retriever.config import load_train_config  # noqa: E402
from training.retriever.lenses import NEW_TOKENS  # noqa: E402

WORDS = (
    "the a old red calm sky street night cat mat rocket coin cup river light shadow city quiet storm".split()
)


def variants(args) -> dict[str, dict]:
    exact = {"vision_no_grad": True, "checkpoint_skip_last": args.skip_last}
    return {
        "baseline": {},
        "vision_no_grad": {"vision_no_grad": True},
        "lora_no_input_cast": {"lora_no_input_cast": True},
        f"checkpoint_skip_last={args.skip_last}": {"checkpoint_skip_last": args.skip_last},
        **{f"length_chunks={k}": {"length_chunks": k} for k in args.chunks},
        f"compile_layers ({args.compile_backend})": {"compile_layers": True, "compile_backend": args.compile_backend},
        "bit-equal levers together": exact,
        "all levers": {**exact, "lora_no_input_cast": True, "length_chunks": max(args.chunks), "compile_layers": True,
                       "compile_backend": args.compile_backend},
        "baseline (again)": {},
    }  # fmt: skip


def synthetic_items(n_images: int, captions_per_image: int, image_size: int, seed: int) -> list:
    """(index, PIL image, prompts, captions) of the shapes the collator sees in training."""
    import numpy as np
    from PIL import Image

    rng = random.Random(seed)
    pixels = np.random.default_rng(seed)

    def text(n_words: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n_words))

    items = []
    for i in range(n_images):
        image = Image.fromarray(pixels.integers(0, 256, (image_size, image_size, 3), dtype=np.uint8))
        prompts = [(text(rng.randint(10, 20)), rng.randrange(5)) for _ in range(rng.randint(1, 12))]
        captions = [(text(rng.randint(25, 90)), rng.randrange(5)) for _ in range(captions_per_image)]
        items.append((i, image, sorted(prompts, key=lambda p: p[1]), captions))
    return items


def base_source(args, cfg, tmp: Path):
    """(build(cfg, device), processor). Tiny: a random tiny base on disk. Production: the model
    directory's config and processor files, random bf16 weights made on the device."""
    if args.size == "tiny":
        from training.dryrun.tiny import materialize_tiny_base

        texts = [" ".join(WORDS)] * 4
        base = materialize_tiny_base(tmp / "base", texts, cfg.model.tiny)

        def build_tiny(c, device):
            torch.manual_seed(0)  # the same LoRA init in every variant
            return build_retriever(c, base, device, checkpointing=True)

        return build_tiny, _processor(base)
    from transformers import AutoConfig, LlavaNextForConditionalGeneration

    config = AutoConfig.from_pretrained(args.model_dir)
    attn = {"attn_implementation": cfg.model.attn_implementation} if cfg.model.attn_implementation else {}

    def build(c, device):
        processor = _processor(args.model_dir)
        # the same random weights and LoRA init in every variant; a config copy, as adding the
        # lens tokens may grow the vocabulary recorded in it
        torch.manual_seed(0)
        with torch.device(device):
            model = LlavaNextForConditionalGeneration._from_config(
                copy.deepcopy(config), dtype=torch.bfloat16, **attn
            )
        return assemble_retriever(c, model, processor, device, checkpointing=True)

    return build, _processor(args.model_dir)


def _processor(model_dir):
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(str(model_dir))
    processor.tokenizer.padding_side = "right"  # as build_retriever sets it
    # the ids add_lens_tokens gives each built model: same files, same order
    processor.tokenizer.add_tokens(list(NEW_TOKENS), special_tokens=True)
    return processor


class PeakMemory:
    """The CUDA allocator's peak allocated and reserved GiB over the block."""

    def __init__(self, device: torch.device):
        self.device = device

    def __enter__(self):
        torch.cuda.reset_peak_memory_stats(self.device)
        return self

    def __exit__(self, *exc):
        self.allocated = torch.cuda.max_memory_allocated(self.device) / 2**30
        self.reserved = torch.cuda.max_memory_reserved(self.device) / 2**30


def time_micro_batches(retriever, batches: list, device: torch.device, warmup: int) -> tuple[list, float]:
    """Seconds of forward + backward per micro-batch after `warmup`, and the first loss."""
    times, first_loss = [], None
    for i, batch in enumerate(batches):
        torch.manual_seed(i)  # the same dropout draws in every variant
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        out = retriever(batch)
        out["total"].backward()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
        first_loss = float(out["total"].detach()) if first_loss is None else first_loss
        retriever.zero_grad(set_to_none=True)
    return times, first_loss


def run_on_gpu(build, configs: dict, batches: list, device: torch.device, warmup: int) -> dict:
    """One variant after another, each built fresh and freed (a 7.6B model each)."""
    rows = {}
    for name, cfg in configs.items():
        try:
            retriever, _, _ = build(cfg, device)
            with PeakMemory(device) as mem:
                times, loss = time_micro_batches(retriever.train(), batches, device, warmup)
            rows[name] = {"sec": statistics.median(times), "alloc": mem.allocated, "reserved": mem.reserved}
            rows[name]["loss"] = loss
        except Exception as exc:  # noqa: BLE001 - one variant's failure (OOM, compile) is a row
            rows[name] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:100]}"}
        retriever = None
        gc.collect()
        torch.cuda.empty_cache()
        print(name, rows[name], flush=True)
    return rows


def run_on_cpu(build, configs: dict, batches: list, warmup: int, rounds: int) -> dict:
    """All variants built at once and timed round-robin, median per variant: a shared CPU's speed
    drifts within minutes, and interleaving spreads the drift over every variant alike. Memory
    is not measured here (the CPU allocator keeps freed memory, so per-variant peaks in one
    process are not comparable); the GPU run reports the allocator's peaks."""
    cpu = torch.device("cpu")
    models = {name: build(cfg, cpu)[0].train() for name, cfg in configs.items()}
    times: dict[str, list] = {name: [] for name in models}
    losses = {}
    for r in range(rounds):
        for name, retriever in models.items():
            spent, losses[name] = time_micro_batches(retriever, batches, cpu, warmup if r == 0 else 0)
            times[name] += spent
        print(
            f"round {r + 1}/{rounds}",
            {n: round(statistics.median(t), 4) for n, t in times.items()},
            flush=True,
        )
    nan = float("nan")
    return {
        n: {"sec": statistics.median(times[n]), "alloc": nan, "reserved": nan, "loss": losses[n]}
        for n in models
    }


def loss_seconds(cfg, device: torch.device, n_img: int, n_txt: int, hidden: int, slots: int = 16) -> float:
    """Forward + backward of the whole loss (Eqs. 4-10) on random embeddings of a global batch."""
    from training.retriever.model import Embeddings, LensRetriever, TokenIds

    gen = torch.Generator(device=device).manual_seed(0)
    losses = LensRetriever(torch.nn.Identity(), TokenIds(0, (1, 2, 3, 4, 5), 6, 7), cfg.loss).losses
    img_ids = torch.arange(n_img, device=device)
    txt_ids = img_ids.repeat_interleave(n_txt // n_img)
    lens = torch.randint(-1, 5, (n_img, slots), device=device, generator=gen)
    txt_lens = torch.full((n_txt, 5), -1, device=device)
    txt_lens[torch.arange(n_txt), torch.randint(0, 5, (n_txt,), device=device, generator=gen)] = 1

    def leaf(*shape):
        return torch.randn(*shape, device=device, generator=gen).requires_grad_()

    img = Embeddings(leaf(n_img, slots, hidden), lens, leaf(n_img, hidden))
    txt = Embeddings(leaf(n_txt, 5, hidden), txt_lens, leaf(n_txt, hidden))
    t0 = time.perf_counter()
    losses(img, txt, img_ids, txt_ids)["total"].backward()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0


def machine(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}"
    return f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}"


def report(args, rows: dict, batches: list, device: torch.device) -> str:
    img_tokens = sum(int(b["img_attention_mask"].sum()) for b in batches) / (len(batches) * args.images)
    img_padded = sum(b["img_attention_mask"].numel() for b in batches) / (len(batches) * args.images)
    cap_tokens = sum(int(b["txt_attention_mask"].sum()) for b in batches) / sum(
        len(b["txt_lens"]) for b in batches
    )
    base = rows["baseline"]
    if "error" in base:
        return f"baseline failed: {base['error']}\n"
    lines = [
        f"bench_train_levers.py --device {args.device} --size {args.size} --images {args.images}: "
        f"{machine(device)}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {args.steps} timed micro-batches "
        f"after {args.warmup} warm-up; {img_tokens:.0f} real tokens per image input "
        f"({img_padded:.0f} padded), {cap_tokens:.0f} per caption input",
        "",
        "| variant | s / micro-batch | speed-up vs baseline | images/s | peak GiB | peak vs baseline | reserved GiB | loss |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        if "error" in r:
            lines.append(f"| {name} | {r['error']} | | | | | | |")
            continue
        mem_ratio = r["alloc"] / base["alloc"] if base.get("alloc") else float("nan")
        alloc, ratio, reserved = (
            ("not compared",) * 3 if mem_ratio != mem_ratio else (f"{r['alloc']:.2f}", f"{mem_ratio:.2f}", f"{r['reserved']:.2f}")
        )  # fmt: skip
        lines.append(
            f"| {name} | {r['sec']:.3f} | {base['sec'] / r['sec']:.2f}x | {args.images / r['sec']:.2f} | "
            f"{alloc} | {ratio} | {reserved} | {r['loss']:.6f} |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--size", default="tiny", choices=["tiny", "production"])
    parser.add_argument(
        "--model-dir", help="production: a directory with the model's config and processor files"
    )
    parser.add_argument("--config", help="train config (default: tiny / h200x8 by --size)")
    parser.add_argument("--images", type=int, default=6, help="images per micro-batch")
    parser.add_argument("--captions-per-image", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--skip-last", type=int, default=1)
    parser.add_argument(
        "--chunks",
        type=int,
        nargs="+",
        default=[2],
        help="length_chunks values (= --images: no padding at all)",
    )
    parser.add_argument("--compile-backend", default=None, help="default: inductor on cuda, aot_eager on cpu")
    parser.add_argument("--only", nargs="*", help="variant names to run (baseline always runs)")
    parser.add_argument(
        "--loss-shape",
        type=int,
        nargs=3,
        default=[160, 320, 4096],
        metavar=("IMAGES", "CAPTIONS", "HIDDEN"),
        help="global batch the loss is timed at (default: the recipe's 8 ranks x 20 images, Mistral-7B width)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="CPU: interleaved timing rounds")
    parser.add_argument("--threads", type=int, default=1, help="CPU intra-op threads")
    parser.add_argument("--write", help="append the markdown table to this file")
    args = parser.parse_args(argv)
    if args.size == "production" and not args.model_dir:
        parser.error("--size production needs --model-dir")
    args.compile_backend = args.compile_backend or ("inductor" if args.device == "cuda" else "aot_eager")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cpu":
        torch.set_num_threads(args.threads)  # tiny matrices gain nothing from threads on a shared box
    device = torch.device(args.device)
    precision = (
        "bf16" if args.device == "cuda" or args.size == "production" else "fp32"
    )  # production: bf16 weights
    config = args.config or ("tiny" if args.size == "tiny" else "h200x8")
    cfg = load_train_config(config, {"run": {"precision": precision, "device": args.device}})
    with tempfile.TemporaryDirectory(prefix="bench-levers-") as tmp:  # the tiny base, deleted after
        build, processor = base_source(args, cfg, Path(tmp))
        collator = Collator(processor, cfg.data, lens_mode=cfg.loss.mode == "lens")
        size = cfg.data.image_size
        batches = [
            to_device(
                collator.train_batch(synthetic_items(args.images, args.captions_per_image, size, seed)),
                device,
            )
            for seed in range(args.warmup + args.steps)
        ]
        configs = {
            name: cfg.model_copy(update={"speed": cfg.speed.model_copy(update=speed)})
            for name, speed in variants(args).items()
            if not args.only or name in args.only or name.startswith("baseline")
        }
        if device.type == "cuda":
            rows = run_on_gpu(build, configs, batches, device, args.warmup)
        else:
            rows = run_on_cpu(build, configs, batches, args.warmup, args.rounds)
        loss_seconds(cfg, device, 16, 32, 64)  # warm-up
        n_img, n_txt, hidden = args.loss_shape
        loss_sec = loss_seconds(cfg, device, n_img, n_txt, hidden)
        table = report(args, rows, batches, device)
        table += (
            f"\nWhole loss (Eqs. 4-10), forward + backward, {n_img} images x {n_txt} captions gathered, d={hidden}, "
            f"16 image slots: {loss_sec:.3f} s ({loss_sec / rows['baseline'].get('sec', float('nan')):.3f} of a baseline micro-batch "
            "above; on one rank of the recipe the loss sees this whole gathered batch)\n"
        )
    print(table)
    if args.write:
        with open(args.write, "a") as fh:
            fh.write(table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
