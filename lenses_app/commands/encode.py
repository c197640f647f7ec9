"""`lenses encode`: write image/caption slots and global embeddings of a split for evaluation."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "encode",
        help="encode one export split with a trained retriever checkpoint (resumable, chunked .npz)",
        description="Encode every image (with its lens-labelled prompt slots) and every caption (all five "
        "lens slots active, no label given) of a split, writing OUT/images/chunk-*.npz, "
        "OUT/captions/chunk-*.npz and OUT/manifest.json. Finished chunks are skipped on rerun.",
    )
    parser.add_argument(
        "--checkpoint", required=True, help="checkpoint folder RUN/checkpoints/step-XXXXXXX, or a run folder"
    )
    parser.add_argument("--export", required=True, help="export folder (images/captions/prompts.parquet)")
    parser.add_argument("--split", default="test", choices=["train", "valid", "test"], help="split to encode")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--batch-size", type=int, default=16, help="rows per forward pass")
    parser.add_argument("--chunk-size", type=int, default=1024, help="rows per output file")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="device")
    parser.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from pathlib import Path

    from training.evaluation.encode import encode_split
    from training.loop.checkpoint import latest_checkpoint

    ckpt = Path(args.checkpoint)
    if not (ckpt / "state.json").exists():
        found = latest_checkpoint(ckpt)
        if found is None:
            print(f"no checkpoint under {ckpt}")
            return 2
        ckpt = found
    manifest = encode_split(
        ckpt,
        args.export,
        args.split,
        args.out,
        batch_size=args.batch_size,
        chunk_size=args.chunk_size,
        device=args.device,
    )
    print(
        f"encoded {manifest['images']} images and {manifest['captions']} captions of {args.split} -> {args.out}"
    )
    return 0
