"""Rehearsal: the whole build (`lenses run`) at several pool sizes against an external simulator.

    .venv/bin/python benchmarks/bench_rehearsal.py --sizes 20000 100000 --write /tmp/rehearsal.md
    .venv/bin/python benchmarks/bench_rehearsal.py --sizes 500            # smoke run (~1 min)

The pool is generated here, in a temporary directory that is deleted at the end (never committed):
collages of 2-5 windows of real photographs from installed packages (`lenses_data.candidates.sample._photo_sources`,
minus the flat or dark ones whose windows hash alike), each window colour-jittered and maybe mirrored,
with grain, 512 px on the long side, in folders of CHUNK images; one image in 21 is a planted
near-duplicate (an earlier image of its folder, scaled to 90% and re-encoded at lower quality). The
largest pool is generated once; a smaller size uses hard links to its first folders, so every size
sees the same images.

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
# flat, dark or low-detail photos: windows of them look alike to a 64-bit pHash
DROPPED = frozenset({"clock", "hubble_deep_field", "moon", "page", "retina", "text"})
_PHOTOS: list = []
_NOISE: list = []


def _photos() -> list:
    """The packaged photographs with enough detail, decoded once per process, capped at 1024 px."""
    if not _PHOTOS:
        import io

        from PIL import Image

        from lenses_data.candidates.sample import _photo_sources

        for name, (data, _suffix, _origin) in sorted(_photo_sources().items()):
            if name not in DROPPED:
                image = Image.open(io.BytesIO(data)).convert("RGB")
                image.thumbnail((1024, 1024))
                _PHOTOS.append(image)
    return _PHOTOS


def _noise():
    """A grain image (RGB, one Gaussian field per channel), made once per process."""
    if not _NOISE:
        from PIL import Image

        size = (LONG_SIDE, LONG_SIDE)
        _NOISE.append(Image.merge("RGB", [Image.effect_noise(size, 40) for _ in range(3)]))
    return _NOISE[0]


def _cells(rng: random.Random, width: int, height: int) -> list[tuple[int, int, int, int]]:
    """Split the canvas 1-4 times (guillotine cuts at 30-70%) into 2-5 boxes (x0, y0, x1, y1)."""
    boxes = [(0, 0, width, height)]
    for _ in range(rng.randint(1, 4)):
        x0, y0, x1, y1 = boxes.pop(rng.randrange(len(boxes)))
        if x1 - x0 >= y1 - y0:
            cut = x0 + round((x1 - x0) * rng.uniform(0.3, 0.7))
            boxes += [(x0, y0, cut, y1), (cut, y0, x1, y1)]
        else:
            cut = y0 + round((y1 - y0) * rng.uniform(0.3, 0.7))
            boxes += [(x0, y0, x1, cut), (x0, cut, x1, y1)]
    return boxes


def _tile(rng: random.Random, width: int, height: int):
    """A random window of a random photo, resized to width x height, maybe mirrored, with a colour
    jitter per channel (gain and offset: one lookup table, cheap)."""
    from PIL import Image, ImageOps

    photo = rng.choice(_photos())
    w, h = photo.size
    ch = h * rng.uniform(0.25, 0.8)
    cw = ch * width / height
    if cw > w:
        cw, ch = w, w * height / width
    cw, ch = max(8, int(cw)), max(8, int(ch))
    x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
    tile = photo.resize((width, height), Image.Resampling.BILINEAR, box=(x, y, x + cw, y + ch))
    if rng.random() < 0.5:
        tile = ImageOps.mirror(tile)
    table = []
    for _channel in range(3):
        gain, offset = rng.uniform(0.6, 1.4), rng.uniform(-50, 50)
        table += [max(0, min(255, round(v * gain + offset))) for v in range(256)]
    return tile.point(table)


def _collage(rng: random.Random):
    """A 512 px (long side) collage of 2-5 jittered windows from different photos, with grain."""
    from PIL import Image

    aspect = rng.uniform(0.67, 1.5)
    width, height = (
        (LONG_SIDE, round(LONG_SIDE / aspect)) if aspect >= 1 else (round(LONG_SIDE * aspect), LONG_SIDE)
    )
    canvas = Image.new("RGB", (width, height))
    for x0, y0, x1, y1 in _cells(rng, width, height):
        canvas.paste(_tile(rng, x1 - x0, y1 - y0), (x0, y0))
    dx, dy = rng.randint(0, LONG_SIDE - width), rng.randint(0, LONG_SIDE - height)
    grain = _noise().crop((dx, dy, dx + width, dy + height))
    return Image.blend(canvas, grain, rng.uniform(0.03, 0.12))


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
            image, quality = _collage(rng), 90
            recent = [*recent[-(PLANT_EVERY - 2) :], image]
        path = folder / f"img{i:04d}.jpg"
        image.save(path, "JPEG", quality=quality)
        size += path.stat().st_size
    return size, planted


def planted_in(count: int) -> int:
    """Planted near-duplicates among the first `count` images (same positions in every folder)."""
    return count // CHUNK * sum(1 for i in range(CHUNK) if i % PLANT_EVERY == PLANT_EVERY - 1)


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


def _role(proc: psutil.Process, root: int) -> str:
    """Which part of the build a process is: the coordinator, Prefect's temporary API server, or a
    helper (decode workers, the multiprocessing resource tracker)."""
    if proc.pid == root:
        return "coordinator"
    try:
        line = " ".join(proc.cmdline())
    except psutil.Error:
        return "worker"
    if "prefect" in line or "uvicorn" in line:
        return "prefect_server"
    return "tracker" if "resource_tracker" in line else "worker"


def tree_rss(process: psutil.Process) -> dict[str, int]:
    """RSS by role over a process and all its descendants (shared pages count once per process)."""
    roles: dict[str, int] = {}
    for proc in [process, *process.children(recursive=True)]:
        try:
            rss = proc.memory_info().rss
        except psutil.Error:
            continue
        role = _role(proc, process.pid)
        roles[role] = roles.get(role, 0) + rss
    return roles


def _current(run: Path, stages: list[str]) -> str:
    return next((s for s in stages if not (run / s / "_SUCCESS.json").exists()), "done")


def watch(command: list[str], run: Path, stages: list[str], log: Path) -> dict:
    """Run the build; sample RSS by role (and per running stage) and note each stage marker's time."""
    started = time.time()
    peak, at_peak, roles, per_stage = 0, {}, {}, {}
    with log.open("w") as out:
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        proc = psutil.Process(child.pid)
        while child.poll() is None:
            sample, stage = tree_rss(proc), _current(run, stages)
            total = sum(sample.values())
            if total > peak:
                peak, at_peak = total, sample
            for role, rss in sample.items():
                roles[role] = max(roles.get(role, 0), rss)
            row = per_stage.setdefault(stage, {"tree": 0, "coordinator": 0})
            row["tree"] = max(row["tree"], total)
            row["coordinator"] = max(row["coordinator"], sample.get("coordinator", 0))
            time.sleep(0.5)
    if child.returncode:
        kept = Path("/tmp") / f"failed-{log.name}"
        shutil.copy(log, kept)  # the temporary directory (and the log in it) goes away with the error
        raise RuntimeError(f"build failed ({child.returncode}); its output: {kept}")
    ends = {
        s: (run / s / "_SUCCESS.json").stat().st_mtime for s in stages if (run / s / "_SUCCESS.json").exists()
    }
    return {"started": started, "ends": ends, "wall": time.time() - started, "peak_rss": peak,
            "peak_roles": at_peak, "role_peaks": roles, "stage_rss": per_stage}  # fmt: skip


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
    from lenses_data.simulator.testing import spawn_simulator
    from lenses_data.stages.registry import pipeline_order

    pool, run = pools / f"n{size}", work / f"run{size}"
    sim, sim_url = spawn_simulator(sim_args)
    try:
        write_config(work / f"n{size}.yaml", run, pool, sim_url)
        command = [sys.executable, "-m", "lenses_app.cli", "run", "--config", str(work / f"n{size}.yaml")]
        stages = pipeline_order(config_from_dict({}, environ={}))
        pressure, commit = cpu_pressure(), _commit()
        result = watch(command, run, stages, work / f"run{size}.log")
        result["sim_rss"] = psutil.Process(sim.pid).memory_info().rss
        shutil.copy(work / f"run{size}.log", logs / f"run{size}.log")  # the build's output outlives the pool
    finally:
        sim.kill()
        sim.wait()
    result["pressure"], result["commit"] = (pressure, cpu_pressure()), commit
    result["funnel"] = funnel(logs / f"run{size}.log")
    result["requests"], result["journal_bytes"] = journal_counts(run)
    previous, result["stages"] = result["started"], {}
    for stage in stages:
        end = result["ends"].get(stage)
        if end is not None:
            result["stages"][stage], previous = end - previous, end
    return result


def _commit() -> str:
    """HEAD of the checkout `lenses run` imports from (others may commit during a long run)."""
    repo = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    return out.stdout.strip() + (" (plus uncommitted edits)" if dirty else "")


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
    planted = planted_in(count)
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
        "- Near-duplicates planted / removed by dedupe: "
        + "; ".join(
            f"{n:,}: {planted_in(n):,} / {results[n]['funnel'].get('dedupe', {}).get('rejected', 0):,}"
            for n in (small, large)
        )
        + ".",
        "- Peak RSS by process role (each role's own peak): "
        + "; ".join(
            f"{n:,}: " + ", ".join(f"{k} {_mb(v)}" for k, v in results[n]["role_peaks"].items())
            for n in (small, large)
        )
        + ".",
        "- Peak RSS while each stage ran (tree / coordinator) at "
        + "; ".join(
            f"{n:,}: "
            + ", ".join(
                f"{k} {_mb(v['tree'])} / {_mb(v['coordinator'])}" for k, v in results[n]["stage_rss"].items()
            )
            for n in (small, large)
        )
        + ".",
        f"- Commit measured (HEAD when each build started): {a['commit']} / {b['commit']}.",
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
            saved = {"pool": [sizes[-1], total_bytes, planted], "results": results}
            (Path(args.logs) / "results.json").write_text(json.dumps(saved, default=str))
    text = report(sizes, results, (sizes[-1], total_bytes, planted), args)
    print(text)
    if args.write:
        Path(args.write).write_text(text)


if __name__ == "__main__":
    main()
