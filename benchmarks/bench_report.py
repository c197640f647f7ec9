"""Build report (`lenses report`): time and size for N gallery images at two dataset sizes.

The claim: the report's cost follows N, not the dataset. A 100k-image build cannot be made quickly,
so an export-shaped run directory is synthesised here (in a temporary directory, deleted at the end):
`export/` (images, captions, prompts and rejections tables written by the export's own writers,
`manifest.json`, the card's `card_counts.json`), and the run's `ingest`, `dedupe` (+ `pairs.parquet`,
`summary.json`)
and `generate` shards that the report looks things up in. 7 captions and 7 prompts per image (the
paper: 732,405 captions for 105,669 images), one image in 20 a dropped near-duplicate, rejections
of ~0.4 per image over 8 reasons. The image files are the sample pool's 16 photographs, reused by
path (the report decodes only the images it shows).

For each size the report is written three times into fresh folders (thumbnails made every time)
and once more into the last folder (thumbnails already there); best of three. Baseline: the 10k
build in the same process; the reference row reads the whole captions table, as a report built
on pandas would.

    .venv/bin/python benchmarks/bench_report.py [--sizes 10000 100000] [--n 200]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from lenses_data import io
from lenses_data.candidates.sample import build_sample_pool
from lenses_data.publish import card_counts
from lenses_data.publish.report import write_report
from lenses_data.schemas import LENS_NAMES, Rejection
from lenses_data.stages.export_tables import ROW_GROUP_ROWS, ExportImage, ExportText, typed_parquet

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ingest import cpu_pressure  # noqa: E402

TEXTS_PER_IMAGE = 7  # per kind
SHARD = 5000
REASONS = [("ingest", "too_small"), ("dedupe", "near_duplicate_phash"), ("filter", "filter_no")]
REASONS += [("rules", r) for r in ("word_count_low", "word_count_high", "near_duplicate", "forbidden_idiom")]
REASONS += [("validate", "validator_discarded")]
WORDS = "light shadow river stone glass memory quiet window storm bridge harvest ember lantern".split()


def _sentences(rng: np.random.Generator, count: int) -> pa.Array:
    pool = [" ".join(rng.choice(WORDS, size=14)).capitalize() + ", a house of cards." for _ in range(997)]
    return pa.array(pool).take(pa.array(rng.integers(0, len(pool), size=count)))


def _texts(ids: np.ndarray, splits: np.ndarray, kind: str, rng: np.random.Generator) -> pa.Table:
    """Export-shaped texts, sorted by image id like the export's."""
    per = TEXTS_PER_IMAGE
    image = np.repeat(ids, per)
    text_ids = np.char.add(
        np.char.add(image.astype(str), kind[0]), np.tile(np.arange(per).astype(str), len(ids))
    )
    text = _sentences(rng, len(image))
    return pa.table(
        {
            "text_id": text_ids,
            "image_id": image,
            "split": np.repeat(splits, per),
            "lens": np.tile(np.array(LENS_NAMES * 2)[:per], len(ids)),
            "text": text,
            "focus": pa.array(["quiet window"] * len(image)),
            "idioms": pa.array([["house of cards"]] * len(image)),
            "edited": np.zeros(len(image), bool),
            "original_text": text,
            "prompt_hash": pa.array(["h"] * len(image)),
            "model": pa.array(["simulated/m"] * len(image)),
            "simulated": np.ones(len(image), bool),
            "flags": pa.array([[]] * len(image), pa.list_(pa.string())),
        }
    )


def synthesise(run: Path, size: int, photos: list[str], seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    export = run / "export"
    export.mkdir(parents=True)
    ids = np.array(sorted(f"{v:016x}" for v in rng.choice(2**62, size=size, replace=False)))
    splits = rng.choice(["train", "valid", "test"], size=size, p=[0.8, 0.05, 0.15])
    paths = np.array(photos)[np.arange(size) % len(photos)]  # any block of rows: the same mix of photos
    images = pd.DataFrame({"image_id": ids, "path": paths, "width": 512, "height": 512, "split": splits})
    typed_parquet(export / "images.parquet", images.assign(source=paths, group_id=ids), ExportImage)
    captions, prompts = _texts(ids, splits, "caption", rng), _texts(ids, splits, "prompt", rng)
    typed_parquet(export / "captions.parquet", captions, ExportText)
    typed_parquet(export / "prompts.parquet", prompts, ExportText)
    order = rng.permutation(size)  # ingest order is not id order
    for start in range(0, size, SHARD):
        part = order[start : start + SHARD]
        ingest = pa.table({"image_id": ids[part], "path": paths[part], "licence": ["CC BY 4.0"] * len(part)})
        io.write_table(io.shard_path(run, "ingest", start // SHARD), ingest)
        dropped = np.arange(len(part)) % 20 == 19  # linked to the image before it
        groups = np.where(dropped, np.roll(ids[part], 1), ids[part])
        dedupe = pa.table(
            {
                "image_id": ids[part],
                "group_id": groups,
                "kept": ~dropped,
                "signal": pa.array(np.where(dropped, "phash", None).tolist(), pa.string()),
                "distance": pa.array(
                    np.where(dropped, rng.integers(0, 9, len(part)), np.nan), from_pandas=True
                ),
                "linked_via": pa.array(np.where(dropped, groups, None).tolist(), pa.string()),
            }
        )
        io.write_table(io.shard_path(run, "dedupe", start // SHARD), dedupe)
    rows = SHARD * TEXTS_PER_IMAGE  # generate shards: the captions again, where rejected text ids are found
    for index, start in enumerate(range(0, len(captions), rows)):
        part = captions.slice(start, rows).select(["text_id", "image_id", "lens", "text", "focus"])
        io.write_table(
            io.shard_path(run, "generate", index),
            part.append_column("kind", pa.array(["caption"] * len(part))),
        )
    _pairs_and_rejections(run, ids, order, captions, rng)
    _counts_and_manifest(run, images, captions, prompts)


def _pairs_and_rejections(run: Path, ids, order, captions: pa.Table, rng: np.random.Generator) -> None:
    export = run / "export"
    dropped = np.array([i for i in range(len(order)) if i % SHARD % 20 == 19])
    pairs = pd.DataFrame(
        {
            "image_a": ids[order[dropped - 1]],
            "image_b": ids[order[dropped]],
            "signal": "phash",
            "tier": "duplicate",
        }
    )
    pairs["hamming"], pairs["cosine"] = rng.integers(0, 9, len(pairs)), np.nan
    io.write_table(
        io.stage_dir(run, "dedupe") / "pairs.parquet", pa.Table.from_pandas(pairs, preserve_index=False)
    )
    thresholds = {"hamming_radius": 8, "crop_radius": 8, "crop_confirm_radius": 14, "clip_threshold": 0.95}
    io.atomic_write_json(io.stage_dir(run, "dedupe") / "summary.json", {"thresholds": thresholds})
    count = int(0.4 * len(ids))
    which = rng.integers(0, len(REASONS), size=count)
    texts = captions["text_id"].to_numpy(zero_copy_only=False)[rng.integers(0, len(captions), size=count)]
    images = ids[rng.integers(0, len(ids), size=count)]
    rows = pd.DataFrame(
        {
            "stage": [REASONS[w][0] for w in which],
            "reason": [REASONS[w][1] for w in which],
            "record_id": np.where(which >= 3, texts, images),
            "message": "a message of the stage",
            "source": None,
            "image_id": images,
            "raw": None,
        }
    ).sort_values(["stage", "reason"], kind="stable", ignore_index=True)
    io.write_table(export / "rejections.parquet", io.to_table(rows, Rejection), row_group_size=ROW_GROUP_ROWS)


def _counts_and_manifest(run: Path, images: pd.DataFrame, captions: pa.Table, prompts: pa.Table) -> None:
    export = run / "export"
    light = [t.select(["image_id", "split", "lens"]).to_pandas() for t in (captions, prompts)]
    rejections = pd.read_parquet(export / "rejections.parquet", columns=["stage", "reason", "record_id"])
    card_counts.write_counts(export, card_counts.count_tables(run, images, *light, rejections))
    tables = {"captions.parquet": len(captions), "prompts.parquet": len(prompts)}
    manifest = {"created_at": "synthetic", "simulated": True, "tables": tables}
    (export / "manifest.json").write_text(json.dumps(manifest))


def measure(runs: dict[int, Path], n: int, repeats: int) -> dict[int, dict[str, float]]:
    """Best of `repeats` per size, sizes interleaved (the shared machine's speed drifts)."""
    best: dict[int, dict[str, float]] = {size: {} for size in runs}
    for attempt in range(repeats):
        for size, run in runs.items():
            cold = write_report(run, out=run / f"report-{attempt}", n=n)  # thumbnails made
            warm = write_report(run, out=run / f"report-{attempt}", n=n)  # thumbnails there
            started = time.perf_counter()
            pd.read_parquet(run / "export" / "captions.parquet")
            figures = {
                "cold": cold["seconds"],
                "warm": warm["seconds"],
                "whole": time.perf_counter() - started,
                "bytes": cold["bytes"],
                "images": cold["images"],
            }
            best[size] = {k: min(v, best[size].get(k, v)) for k, v in figures.items()}
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        pool = Path(tmp) / "pool"
        build_sample_pool(pool)
        photos = sorted(str(p) for p in (pool / "originals").glob("*.*"))
        runs = {size: Path(tmp) / f"run-{size}" for size in args.sizes}
        for size, run in runs.items():
            started = time.perf_counter()
            synthesise(run, size, photos)
            print(f"synthesised {size:,} images in {time.perf_counter() - started:.0f} s", flush=True)
        before = cpu_pressure()
        results = measure(runs, args.n, args.repeats)
    print(f"N = {args.n}; best of {args.repeats}; CPU pressure {before} before, {cpu_pressure()} after")
    base = results[args.sizes[0]]
    print(
        "\n| images in the build | report, thumbnails made (s) | ratio | thumbnails there (s) | ratio "
        "| size (MB) | ratio | whole captions table read (s) | ratio |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for size, r in results.items():
        print(
            f"| {size:,} | {r['cold']:.2f} | {r['cold'] / base['cold']:.2f} | {r['warm']:.2f} "
            f"| {r['warm'] / base['warm']:.2f} | {r['bytes'] / 1e6:.2f} | {r['bytes'] / base['bytes']:.2f} "
            f"| {r['whole']:.2f} | {r['whole'] / base['whole']:.2f} |"
        )


if __name__ == "__main__":
    main()
