"""CLIP embedding rate of the dedupe stage: encoder alone vs the whole embed_images loop, the code
path before issue 31 ("before") vs the current one ("now"), in the same process, on real JPEGs.

    .venv/bin/python benchmarks/bench_clip_embed.py                      # CPU, small random model
    .venv/bin/python benchmarks/bench_clip_embed.py --device cuda --model ViT-L-14 --batch 256 --images 4096

Images: the sample pool's photographs (lenses_data/candidates/sample.py: skimage, scikit-learn and
matplotlib photographs plus their JPEG variants), every one as a JPEG (PNG originals re-encoded at
quality 90), cycled to --images files. Weights are random (no download): the speed of a network
does not depend on its weights. The default --model "bench-small" is a ViT at the real 224 px input
with a small trunk (4 layers, width 256), so the CPU run measures the image path, not the matmuls.

- before: the loop as it was: one thread, `load_rgb` (full decode) + open_clip's transform per
  image, fp32, batch 64 (the old default).
- now: `embed_with_model` with the plan `dedupe` resolves for the device (fp32/64 on the CPU,
  bf16/256 on CUDA unless --batch), decode threads (--workers, default one per core), JPEG draft.
- encoder: `encode` on one ready batch already on the device, each path at its own precision/batch.

--ablation adds "now" with one decode thread and "now" without JPEG draft.
Each repeat measures all four in turn; the ratios' medians over --repeats are reported, as JSON.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BENCH_SMALL = {
    "embed_dim": 256,
    "vision_cfg": {"image_size": 224, "layers": 4, "width": 256, "patch_size": 32, "head_width": 64},
    "text_cfg": {"context_length": 16, "vocab_size": 64, "width": 64, "heads": 1, "layers": 1},
}
BEFORE_BATCH = 64


def jpeg_pool(folder: Path, n: int) -> list[str]:
    """n paths cycling over the sample pool's photographs, all as JPEGs."""
    from PIL import Image

    from lenses_data.candidates.sample import build_sample_pool

    manifest = build_sample_pool(folder / "pool")
    photos = [
        f["file"] for f in manifest["files"] if f["kind"] == "original" or f["kind"].startswith("variant")
    ]
    paths = []
    for relative in sorted(set(photos)):
        source = folder / "pool" / relative
        if source.suffix.lower() in (".jpg", ".jpeg"):
            paths.append(str(source))
            continue
        target = folder / "jpeg" / (source.stem + ".jpg")
        target.parent.mkdir(exist_ok=True)
        with Image.open(source) as image:
            buffer = io.BytesIO()
            image.convert("RGB").save(buffer, "JPEG", quality=90)
        target.write_bytes(buffer.getvalue())
        paths.append(str(target))
    return [paths[i % len(paths)] for i in range(n)]


def embed_before(paths: list[str], model, preprocess, device: str) -> int:
    """The loop before issue 31, step for step (clip_embed.py at a650727)."""
    import torch

    from lenses_data.candidates.imaging import load_rgb

    done = 0
    with torch.inference_mode():
        for start in range(0, len(paths), BEFORE_BATCH):
            tensors = [preprocess(load_rgb(p)) for p in paths[start : start + BEFORE_BATCH]]
            features = model.encode_image(torch.stack(tensors).to(device)).float()
            torch.nn.functional.normalize(features, dim=-1).cpu().numpy()
            done += len(tensors)
    return done


def encoder_rate(model, device: str, batch: int, precision: str, rounds: int) -> float:
    import torch

    from lenses_data.dedupe.clip_embed import encode, model_input_side

    side = model_input_side(model)
    x = torch.randn(batch, 3, side, side, device=device)
    with torch.inference_mode():
        encode(model, x, precision).cpu()  # warm-up (kernels, autotuning)
        started = time.perf_counter()
        for _ in range(rounds):
            encode(model, x, precision).cpu()  # .cpu() waits for the device, as the loop does
    return batch * rounds / (time.perf_counter() - started)


def timed(fn) -> float:
    started = time.perf_counter()
    n = fn()
    return n / (time.perf_counter() - started)


def bf16_agreement(paths: list[str], model, preprocess, plan) -> float:
    """Least cosine between fp32 and bf16-autocast embeddings of the same images."""
    from dataclasses import replace

    from lenses_data.dedupe.clip_embed import embed_with_model

    fp32, _, _ = embed_with_model(paths, model, preprocess, replace(plan, precision="fp32"))
    bf16, _, _ = embed_with_model(paths, model, preprocess, replace(plan, precision="bf16"))
    return float((fp32 * bf16).sum(axis=1).min())


def build(args):
    import open_clip
    import torch

    from lenses_data.config.dedupe import DedupeConfig
    from lenses_data.dedupe.clip_embed import embed_plan

    if args.model == "bench-small":
        config_file = Path(tempfile.mkdtemp()) / "bench-small.json"
        config_file.write_text(json.dumps(BENCH_SMALL))
        open_clip.add_model_config(str(config_file))
    torch.manual_seed(0)
    model, _, preprocess = open_clip.create_model_and_transforms(args.model, pretrained=None)
    model.to(args.device).eval()
    config = DedupeConfig(
        clip_batch_size=args.batch, clip_decode_workers=args.workers, clip_device=args.device
    )
    return model, preprocess, embed_plan(config, args.device)


def measure(args) -> dict:
    from dataclasses import replace

    import torch

    from lenses_data.dedupe.clip_embed import embed_with_model

    model, preprocess, plan = build(args)
    paths = jpeg_pool(Path(tempfile.mkdtemp()), args.images)
    warm = paths[: min(len(paths), plan.batch_size)]
    embed_before(warm[:8], model, preprocess, args.device)
    embed_with_model(warm, model, preprocess, plan)
    runs = []
    for repeat in range(args.repeats):
        row = {
            "before_end_to_end": timed(lambda: embed_before(paths, model, preprocess, args.device)),
            "now_end_to_end": timed(lambda: len(embed_with_model(paths, model, preprocess, plan)[0])),
            "before_encoder": encoder_rate(model, args.device, BEFORE_BATCH, "fp32", args.encoder_rounds),
            "now_encoder": encoder_rate(
                model, args.device, plan.batch_size, plan.precision, args.encoder_rounds
            ),
        }
        if args.ablation:  # what each change brings on its own
            for name, change in (
                ("now_one_thread", {"decode_workers": 1}),
                ("now_no_draft", {"jpeg_draft": False}),
            ):
                variant = replace(plan, **change)
                row[name] = timed(lambda v=variant: len(embed_with_model(paths, model, preprocess, v)[0]))
                row[f"{name}_vs_before"] = row[name] / row["before_end_to_end"]
        row["now_vs_before"] = row["now_end_to_end"] / row["before_end_to_end"]
        row["now_end_to_end_vs_encoder"] = row["now_end_to_end"] / row["now_encoder"]
        row["before_end_to_end_vs_encoder"] = row["before_end_to_end"] / row["before_encoder"]
        runs.append({k: round(v, 3) for k, v in row.items()})
        print(json.dumps({"repeat": repeat, **runs[-1]}), file=sys.stderr, flush=True)
    medians = {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}
    return {
        "device": args.device,
        "device_name": torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu",
        "cpu_cores": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "model": args.model,
        "images": len(paths),
        "plan": {k: getattr(plan, k) for k in ("precision", "batch_size", "decode_workers", "jpeg_draft")},
        "before": {"precision": "fp32", "batch_size": BEFORE_BATCH, "decode_workers": 1, "jpeg_draft": False},
        "bf16_min_cosine_vs_fp32": round(bf16_agreement(paths[:64], model, preprocess, plan), 5),
        "median_images_per_s_and_ratios": medians,
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default="bench-small", help="open_clip architecture (random weights)")
    parser.add_argument("--batch", type=int, default=None, help="now's batch; default: the device's default")
    parser.add_argument("--workers", type=int, default=0, help="decode threads; 0: one per core")
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--encoder-rounds", type=int, default=5)
    parser.add_argument(
        "--ablation", action="store_true", help="also: now with one thread, now without draft"
    )
    args = parser.parse_args()
    print(json.dumps(measure(args), indent=2))


if __name__ == "__main__":
    main()
