"""Rehearsal: the whole build (`lenses run`) at several pool sizes against an external simulator.

    .venv/bin/python benchmarks/bench_rehearsal.py --sizes 20000 100000 --write /tmp/rehearsal.md
    .venv/bin/python benchmarks/bench_rehearsal.py --sizes 500            # smoke run (~1 min)

The pool is generated here, in a temporary directory that is deleted at the end (never committed):
real photographs from installed packages (`lenses_data.sample._photo_sources`), cut at random
windows, rotated, flipped, colour-jittered and resized to 512 px on the long side, in folders of
CHUNK images; one image in 21 is a planted near-duplicate (an earlier image of its folder, scaled
to 90% and re-encoded at lower quality). The largest pool is generated once; a smaller size uses
hard links to its first folders, so every size sees the same images.

For each size a fresh `lenses simulate` runs in its own process with the latency model (replicas,
prefill and decode tokens/s per replica) and `lenses run --config` builds the dataset in a
subprocess. The process tree (coordinator plus decode workers) is sampled for RSS; a stage's wall
time runs from the previous stage's `_SUCCESS.json` (or the process start, for ingest, so ingest
includes start-up) to its own. Requests per stage are the journal's lines (RUN/journal/<stage>/).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from multiprocessing import Pool
from pathlib import Path

import psutil  # installed with distributed (the dev extra's prefect-dask)

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ingest import cpu_pressure  # noqa: E402

CHUNK = 500  # images per pool folder
LONG_SIDE = 512
PLANT_EVERY = 21  # every 21st image is a near-duplicate of an earlier one of its folder
_PHOTOS: list = []


def _photos() -> list:
    """The packaged photographs, decoded once per process and capped at 1024 px (cheaper crops)."""
    if not _PHOTOS:
        import io

        from PIL import Image

        from lenses_data.sample import _photo_sources

        for data, _suffix, _origin in _photo_sources().values():
            image = Image.open(io.BytesIO(data)).convert("RGB")
            image.thumbnail((1024, 1024))
            _PHOTOS.append(image)
    return _PHOTOS


def _cut(rng: random.Random):
    """A random window of a random photo at 512 px long side, rotated, maybe flipped, jittered in
    brightness and contrast (one lookup table: the pool of 100k must be cheap to make)."""
    from PIL import Image, ImageOps

    photo = rng.choice(_photos())
    w, h = photo.size
    scale, aspect = rng.uniform(0.35, 0.85), rng.uniform(0.7, 1.4)
    cw, ch = max(32, min(w, int(w * scale * aspect))), max(32, min(h, int(h * scale / aspect)))
    x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
    factor = LONG_SIDE / max(cw, ch)
    tile = photo.resize(
        (round(cw * factor), round(ch * factor)), Image.Resampling.BILINEAR, box=(x, y, x + cw, y + ch)
    )
    tile = tile.rotate(rng.uniform(-20, 20), Image.Resampling.NEAREST)
    if rng.random() < 0.5:
        tile = ImageOps.mirror(tile)
    gain, offset = rng.uniform(0.75, 1.25), rng.uniform(-25, 25)
    return tile.point([max(0, min(255, round(v * gain + offset))) for v in range(256)] * 3)


def make_chunk(task: tuple[str, int]) -> tuple[int, int]:
    """Write folder `index` of the pool; returns (bytes written, planted near-duplicates)."""
    root, index = task
    folder = Path(root) / f"c{index:04d}"
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(index)
    recent, size, planted = [], 0, 0
    for i in range(CHUNK):
        if i % PLANT_EVERY == PLANT_EVERY - 1:
            source = rng.choice(recent)
            image = source.resize((source.width * 9 // 10, source.height * 9 // 10))
            quality, planted = 70, planted + 1
        else:
            image, quality = _cut(rng), 90
            recent = [*recent[-(PLANT_EVERY - 2) :], image]
        path = folder / f"img{i:04d}.jpg"
        image.save(path, "JPEG", quality=quality)
        size += path.stat().st_size
    return size, planted


def make_pool(root: Path, count: int, processes: int = 2) -> tuple[int, int]:
    """All folders of the largest pool, in parallel; (bytes, planted near-duplicates)."""
    tasks = [(str(root), i) for i in range(count // CHUNK)]
    with Pool(processes) as pool:
        results = pool.map(make_chunk, tasks, chunksize=1)
    return sum(r[0] for r in results), sum(r[1] for r in results)


def link_pool(full: Path, target: Path, count: int) -> None:
    """A pool of the first `count` images of `full`, as hard links (no extra disk)."""
    for index in range(count // CHUNK):
        folder = target / f"c{index:04d}"
        folder.mkdir(parents=True)
        for path in (full / folder.name).iterdir():
            os.link(path, folder / path.name)


def write_config(path: Path, run: Path, pool: Path, sim_url: str) -> None:
    from lenses_data.config.models import ROLES

    config = {
        "run_dir": str(run),
        "ingest": {"sources": [str(pool)], "workers": 2},
        "dedupe": {"hash_kind": "phash", "clip_model": None},  # no CLIP weights ship with any package
        "models": {role: {"base_urls": [sim_url]} for role in ROLES},
        "orchestration": {"task_runner": "thread", "max_workers": 2},
    }
    path.write_text(json.dumps(config))  # JSON is YAML


def tree_rss(process: psutil.Process) -> int:
    """RSS of a process and all its descendants (shared pages count once per process: an upper bound)."""
    total = 0
    for proc in [process, *process.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return total


def watch(command: list[str], run: Path, stages: list[str], log: Path) -> dict:
    """Run the build; sample the tree's RSS and note each stage marker's time."""
    started = time.time()
    with log.open("w") as out:
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        proc, peak = psutil.Process(child.pid), 0
        while child.poll() is None:
            peak = max(peak, tree_rss(proc))
            time.sleep(0.5)
    if child.returncode:
        kept = Path("/tmp") / f"failed-{log.name}"
        shutil.copy(log, kept)  # the temporary directory (and the log in it) goes away with the error
        raise RuntimeError(f"build failed ({child.returncode}); its output: {kept}")
    ends = {
        s: (run / s / "_SUCCESS.json").stat().st_mtime for s in stages if (run / s / "_SUCCESS.json").exists()
    }
    return {"started": started, "ends": ends, "wall": time.time() - started, "peak_rss": peak}


def journal_counts(run: Path) -> tuple[dict[str, int], int]:
    """Journal lines (answered requests) per stage and the journal's total bytes."""
    counts, size = {}, 0
    for path in (run / "journal").rglob("*"):
        if path.is_file():
            size += path.stat().st_size
            if path.suffix == ".jsonl":
                with path.open("rb") as handle:
                    counts[path.parent.name] = counts.get(path.parent.name, 0) + sum(1 for _ in handle)
    return counts, size


def rehearse(size: int, pools: Path, work: Path, sim_args: list[str], logs: Path) -> dict:
    """One build of `size` images against a fresh simulator; per-stage times, requests, memory."""
    from lenses_data.config import config_from_dict
    from lenses_data.models.testing import spawn_simulator
    from lenses_data.stages.registry import pipeline_order

    pool, run = pools / f"n{size}", work / f"run{size}"
    sim, sim_url = spawn_simulator(sim_args)
    try:
        write_config(work / f"n{size}.yaml", run, pool, sim_url)
        command = [sys.executable, "-m", "lenses_data.cli", "run", "--config", str(work / f"n{size}.yaml")]
        stages = pipeline_order(config_from_dict({}, environ={}))
        pressure = cpu_pressure()
        result = watch(command, run, stages, work / f"run{size}.log")
        result["sim_rss"] = psutil.Process(sim.pid).memory_info().rss
        shutil.copy(work / f"run{size}.log", logs / f"run{size}.log")  # the build's output outlives the pool
    finally:
        sim.kill()
        sim.wait()
    result["pressure"] = (pressure, cpu_pressure())
    result["funnel"] = funnel(logs / f"run{size}.log")
    result["requests"], result["journal_bytes"] = journal_counts(run)
    previous, result["stages"] = result["started"], {}
    for stage in stages:
        end = result["ends"].get(stage)
        if end is not None:
            result["stages"][stage], previous = end - previous, end
    return result


def funnel(log: Path) -> dict:
    """The records in/out per stage that `lenses run` prints as a JSON block at the end."""
    lines = log.read_text().splitlines()
    try:
        start, end = lines.index("{"), lines.index("}")
    except ValueError:
        return {}
    return json.loads("\n".join(lines[start : end + 1]))


def _mb(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def report(sizes: list[int], results: dict[int, dict], pool_info: tuple[int, int, int], args) -> str:
    small, large = sizes[0], sizes[-1]
    a, b = results[small], results[large]
    rows = []
    for stage in b["stages"]:
        ta, tb = a["stages"].get(stage, 0.0), b["stages"][stage]
        ra, rb = a["requests"].get(stage, 0), b["requests"].get(stage, 0)
        rates = f"{ra / ta:,.0f} / {rb / tb:,.0f}" if ra and ta and tb else "-"
        ratio = f"{tb / ta:.2f}" if ta else "-"
        rows.append(f"| {stage} | {ta:,.1f} | {tb:,.1f} | {ratio} | {ra:,} / {rb:,} | {rates} |")
    growth = b["wall"] / a["wall"]
    count, total_bytes, planted = pool_info
    lines = [
        "## Rehearsal: the whole build at " + " and ".join(f"{n:,}" for n in sizes) + " candidates",
        "",
        f"One run of `benchmarks/bench_rehearsal.py`: a generated pool of {count:,} photographs cut from the "
        f"packaged sample photos (512 px long side, {total_bytes / count / 1e3:.0f} kB average, "
        f"{planted:,} planted near-duplicates, one in {PLANT_EVERY}); the {small:,} pool is the first "
        f"{small:,} of them. Each size: `lenses run --config` in a subprocess against a fresh "
        f"`lenses simulate {' '.join(args.sim_args)}` in its own process (latency model: "
        f"{args.replicas} replicas, each {args.prefill_tps:,.0f} prompt and {args.decode_tps:,.0f} "
        "completion tokens/s, one request at a time). Thread runner, 2 shard tasks, 2 decode workers, "
        f"shard size 2000, pHash dedupe without CLIP. {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}; CPU pressure (PSI some avg10) before/after: {small:,}: "
        f"{a['pressure'][0]} / {a['pressure'][1]}; {large:,}: {b['pressure'][0]} / {b['pressure'][1]} "
        "(the machine is shared).",
        "",
        f"| stage | wall s at {small:,} | wall s at {large:,} | ratio | requests | requests/s |",
        "|---|---:|---:|---:|---:|---:|",
        *rows,
        f"| **whole build** | **{a['wall']:,.1f}** | **{b['wall']:,.1f}** | **{growth:.2f}** | | |",
        "",
        f"- Growth: time({large:,}) / time({small:,}) = {growth:.2f} for {large / small:.0f}x the images "
        f"(goal <= {1.1 * large / small:.2f}: 5.5 for 20k -> 100k, 1.1 times the size ratio).",
        f"- Peak RSS of the build's process tree (coordinator plus decode workers, summed RSS, so "
        f"shared pages count more than once): {_mb(a['peak_rss'])} at {small:,}, {_mb(b['peak_rss'])} at "
        f"{large:,} (goal <= 1.5 GiB at 100k). The simulator's own RSS at the end: "
        f"{_mb(a['sim_rss'])} / {_mb(b['sim_rss'])}.",
        "- Records out per stage at "
        + " and ".join(
            f"{n:,}: " + ", ".join(f"{k} {v['records_out']:,}" for k, v in results[n]["funnel"].items())
            for n in (small, large)
        )
        + ".",
        f"- Journal (`RUN/journal`, all stages): {_mb(a['journal_bytes'])} at {small:,}, "
        f"{_mb(b['journal_bytes'])} at {large:,}.",
        "- A stage's time runs from the previous stage's `_SUCCESS.json` to its own; ingest includes "
        "the start-up of `lenses run`. Requests are journal lines (answered requests) at each size.",
        f"- Command: `.venv/bin/python benchmarks/bench_rehearsal.py --sizes {' '.join(map(str, sizes))}`.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--replicas", type=int, default=8, help="simulated replicas (an 8-GPU node)")
    parser.add_argument("--prefill-tps", type=float, default=20_000, help="prompt tokens/s per replica")
    parser.add_argument("--decode-tps", type=float, default=2_500, help="completion tokens/s per replica")
    parser.add_argument("--tmp", default=None, help="where the pool and runs go (default: system temp)")
    parser.add_argument("--logs", default="/tmp/rehearsal-logs", help="where each build's output is kept")
    parser.add_argument("--write", help="write the markdown section to this file")
    args = parser.parse_args()
    sizes = sorted(args.sizes)
    if any(n % CHUNK for n in sizes):
        parser.error(f"sizes must be multiples of {CHUNK}")
    args.sim_args = ["--replicas", str(args.replicas), "--prefill-tps", f"{args.prefill_tps:g}",
                     "--decode-tps", f"{args.decode_tps:g}"]  # fmt: skip
    Path(args.logs).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.tmp, prefix="rehearsal-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        total_bytes, planted = make_pool(work / "pools" / f"n{sizes[-1]}", sizes[-1])
        print(
            f"pool of {sizes[-1]:,} in {time.perf_counter() - started:.0f} s, {total_bytes / 1e9:.2f} GB",
            flush=True,
        )
        for size in sizes[:-1]:
            link_pool(work / "pools" / f"n{sizes[-1]}", work / "pools" / f"n{size}", size)
        results = {}
        for size in sizes:
            results[size] = rehearse(size, work / "pools", work, args.sim_args, Path(args.logs))
            print(json.dumps({"size": size, **results[size]}, default=str), flush=True)
    text = report(sizes, results, (sizes[-1], total_bytes, planted), args)
    print(text)
    if args.write:
        Path(args.write).write_text(text)


if __name__ == "__main__":
    main()
