"""A rules-only regeneration (`lenses run --rebuild-changed`) against the full build, at one pool size.

    # 100k, the pool made once into /work/pool100k (about 10 min) and kept for later runs:
    PYTHONPATH=. nice .venv/bin/python benchmarks/bench_regenerate.py --size 100000 \\
        --pool /work/pool100k --tmp /tmp --write /tmp/regenerate.md
    PYTHONPATH=. nice .venv/bin/python benchmarks/bench_regenerate.py --size 500   # smoke run (minutes)

The pool is bench_rehearsal's (generated collages; `--pool DIR` makes it there, or reuses it when
its folders already hold the images, and keeps it; without it the pool goes to a temporary directory
deleted at the end, with the run). One external `lenses simulate` with bench_rehearsal's latency
model answers both builds, on one run directory:

  full    `lenses run --config C1`: C1 is bench_rehearsal's config with the word limits as
          rejections (`annotate.word_limits: reject`), the endpoint probe off (only the pipeline's
          requests are counted) and yields accepted (a changed rejection share is reported, not fatal)
  regen   `lenses run --config C2 --rebuild-changed`: C2 is C1 with the caption word maximum lowered
          22 -> 20 (as bench_answer_reuse's `rule` build), a CPU rule: rules and every later stage
          are rebuilt, their old outputs moved to RUN/_replaced/, their answers reused by request

Per build: wall time and per-stage times (bench_rehearsal's `watch`: from the previous stage's
`_SUCCESS.json` to its own), the simulator's calls (`/sim/reset` before, `/sim/stats` after, by the
stage of each request's key), the journal after the build (answers sent in this build, reused from
an earlier one: a `source_run`, kept from the earlier build), exported captions and how many have
more than 20 words (must be 0 after the regeneration). The headline: time(regen) / time(full).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ingest import cpu_pressure  # noqa: E402
from bench_rehearsal import CHUNK, _commit, link_pool, make_pool, watch  # noqa: E402
from bench_rehearsal import write_config as rehearsal_config  # noqa: E402

LOWERED_MAX = 20  # the regeneration's caption word maximum (the listing's is 22)
SIM_DEFAULTS = {"replicas": 8, "prefill_tps": 20_000.0, "decode_tps": 2_500.0}  # bench_rehearsal's


def full_config(rehearsal: dict) -> dict:
    """C1: bench_rehearsal's config with word limits as rejections, no probe, yields accepted."""
    from lenses_data.merge import deep_merge

    extra = {"annotate": {"word_limits": "reject"}, "models": {"probe": False}, "yields": {"accept": True}}
    return deep_merge(rehearsal, extra)


def lowered_config(config: dict, maximum: int = LOWERED_MAX) -> dict:
    """C2: `config` with only the caption word maximum changed (the minimum stays the listing's)."""
    from lenses_data.config.annotate import LISTING_WORDS
    from lenses_data.merge import deep_merge

    low = LISTING_WORDS["caption"][0]
    return deep_merge(config, {"annotate": {"caption_words": {"min": low, "max": maximum}}})


def pool_ready(pool: Path, size: int) -> bool:
    """Whether `pool` holds bench_rehearsal's first `size` images (every folder complete)."""
    folders = [pool / f"c{i:04d}" for i in range(size // CHUNK)]
    return all(f.is_dir() and sum(1 for _ in f.glob("*.jpg")) == CHUNK for f in folders)


def prepare_pool(kept: Path | None, work: Path, size: int) -> Path:
    """The pool the builds read: `kept` (made there if incomplete) or a temporary one; a kept pool
    with more folders than `size` needs is linked (first `size` images) into `work`."""
    pool = kept or work / "pool"
    if not pool_ready(pool, size):
        started = time.perf_counter()
        total, planted = make_pool(pool, size)
        print(f"pool of {size:,} in {time.perf_counter() - started:.0f} s, {total / 1e9:.2f} GB", flush=True)
    if len([p for p in pool.iterdir() if p.is_dir()]) > size // CHUNK:
        link_pool(pool, work / "pool-linked", size)
        return work / "pool-linked"
    return pool


def sim_calls(url: str) -> dict[str, int]:
    """The simulator's calls since its last reset, by stage (a request key's first part)."""
    stats = httpx.get(url.removesuffix("/v1") + "/sim/stats", timeout=300).json()
    counted: dict[str, int] = {}
    for digest, number in stats["calls"].items():
        stage = stats["keys"].get(digest, "").split(":", 1)[0] or "(no key)"
        counted[stage] = counted.get(stage, 0) + number
    return dict(sorted(counted.items()))


def journal_tally(run: Path, since: float) -> dict[str, dict[str, int]]:
    """Per stage, the run's journal (one best entry per request): answers `sent` in the build that
    started at `since`, `reused` (copied from another journal: a `source_run`) and `kept` (answered
    by an earlier build of this run directory)."""
    from lenses_data.models.journal import read_run_journal

    tally: dict[str, dict[str, int]] = {}
    for entry in read_run_journal(run):
        row = tally.setdefault(entry.key.split(":", 1)[0], {"sent": 0, "reused": 0, "kept": 0})
        bucket = "reused" if entry.source_run else "sent" if entry.created >= since else "kept"
        row[bucket] += 1
    return dict(sorted(tally.items()))


def captions(run: Path, maximum: int = LOWERED_MAX) -> dict[str, int]:
    """Exported captions and how many have more than `maximum` words (as the word limits count)."""
    import pandas as pd

    from lenses_data.annotation.rules import words

    texts = pd.read_parquet(run / "export" / "captions.parquet", columns=["text_id", "text"])["text"]
    return {"exported": len(texts), f"over_{maximum}_words": int(sum(len(words(t)) > maximum for t in texts))}


def funnel_calls(log: Path) -> dict[str, dict[str, int]]:
    """The `calls` and `reused` columns of the funnel table `lenses run` prints at the end (the
    client's own counters: a third count beside the simulator's and the journal's)."""
    lines = log.read_text().splitlines()
    head = next(
        (i for i, line in enumerate(lines) if line.split()[:1] == ["stage"] and "calls" in line), None
    )
    if head is None:
        return {}
    names, out = lines[head].split(), {}
    for line in lines[head + 2 :]:  # past the dashes
        cells = line.split()
        if len(cells) != len(names):
            break
        row = dict(zip(names, cells, strict=True))
        out[row["stage"]] = {"calls": int(row["calls"]), "reused": int(row["reused"])}
    return out


def stage_times(started: float, ends: dict[str, float], stages: list[str]) -> dict[str, float]:
    """A stage's time from the previous rebuilt stage's marker (or the start) to its own; a kept
    stage whose marker predates the build took no time in it."""
    times, previous = {}, started
    for stage in stages:
        end = ends.get(stage)
        if end is None or end < started:
            times[stage] = 0.0
            continue
        times[stage], previous = end - previous, end
    return times


def one_build(name: str, config: dict, work: Path, url: str, stages: list[str], extra: list[str]) -> dict:
    """Build with `config` (written to work/NAME.json), timed and counted."""
    path = work / f"{name}.json"
    path.write_text(json.dumps(config))  # JSON is YAML
    httpx.post(url.removesuffix("/v1") + "/sim/reset", timeout=30)
    command = [sys.executable, "-m", "lenses_app.cli", "run", "--config", str(path), *extra]
    pressure = cpu_pressure()
    result = watch(command, Path(config["run_dir"]), stages, work / f"{name}.log")
    result["pressure"] = (pressure, cpu_pressure())
    result["stages"] = stage_times(result["started"], result["ends"], stages)
    result["sim_calls"] = sim_calls(url)
    result["calls_total"] = sum(result["sim_calls"].values())
    result["journal"] = journal_tally(Path(config["run_dir"]), result["started"])
    result["captions"] = captions(Path(config["run_dir"]))
    result["funnel_calls"] = funnel_calls(work / f"{name}.log")
    return result


def measure(pool: Path, work: Path, sim_args: list[str]) -> dict:
    from lenses_data.config import config_from_dict
    from lenses_data.simulator.testing import spawn_simulator
    from lenses_data.stages.registry import pipeline_order

    run = work / "run"
    stages = pipeline_order(config_from_dict({}, environ={}))
    with (work / "sim.log").open("w") as log:
        sim, url = spawn_simulator(sim_args, log=log)
    try:
        rehearsal_config(work / "rehearsal.json", run, pool, url)
        c1 = full_config(json.loads((work / "rehearsal.json").read_text()))
        full = one_build("full", c1, work, url, stages, [])
        regen = one_build("regen", lowered_config(c1), work, url, stages, ["--rebuild-changed"])
    finally:
        os.killpg(sim.pid, signal.SIGKILL)
        sim.wait()
    replaced = sorted(str(p.relative_to(run)) for p in (run / "_replaced").glob("*/*"))
    return {"full": full, "regen": regen, "replaced": replaced, "ratio": regen["wall"] / full["wall"]}


def _funnel_total(build: dict, column: str) -> int:
    return sum(row[column] for row in build["funnel_calls"].values())


def report(size: int, result: dict, args: argparse.Namespace) -> str:
    full, regen = result["full"], result["regen"]
    rows = []
    for stage, seconds in full["stages"].items():
        j = regen["journal"].get(stage, {})
        rows.append(
            f"| {stage} | {seconds:,.1f} | {regen['stages'].get(stage, 0.0):,.1f} "
            f"| {full['sim_calls'].get(stage, 0):,} | {regen['sim_calls'].get(stage, 0):,} "
            f"| {j.get('sent', 0):,} | {j.get('reused', 0):,} |"
        )
    over = f"over_{LOWERED_MAX}_words"
    lines = [
        f"## Regeneration after a rules-only change at {size:,} candidates (benchmarks/bench_regenerate.py)",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} CPUs, commit "
        f"{result['commit']}; bench_rehearsal's generated pool and config, word limits as rejections, one "
        f"`lenses simulate {' '.join(args.sim_args)}` for both builds. Full: `lenses run --config C1`; "
        f"regeneration: the caption word maximum lowered 22 -> {LOWERED_MAX}, `lenses run --config C2 "
        "--rebuild-changed` on the same run directory. CPU pressure (PSI some avg10) before/after: full "
        f"{full['pressure'][0]} / {full['pressure'][1]}, regeneration {regen['pressure'][0]} / "
        f"{regen['pressure'][1]} (the machine is shared).",
        "",
        "| stage | full wall s | regen wall s | calls full | calls regen | regen journal: sent | reused |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *rows,
        f"| **whole build** | **{full['wall']:,.1f}** | **{regen['wall']:,.1f}** | **{full['calls_total']:,}** "
        f"| **{regen['calls_total']:,}** | | |",
        "",
        f"- time(regeneration) / time(full build) = **{result['ratio']:.3f}** (same process, same simulator).",
        f"- Exported captions: {full['captions']['exported']:,} after the full build "
        f"({full['captions'][over]:,} over {LOWERED_MAX} words), {regen['captions']['exported']:,} after "
        f"the regeneration ({regen['captions'][over]:,} over {LOWERED_MAX} words).",
        "- The builds' own funnels (the client's counters): calls "
        f"{_funnel_total(full, 'calls'):,} / {_funnel_total(regen, 'calls'):,}, answers reused "
        f"{_funnel_total(full, 'reused'):,} / {_funnel_total(regen, 'reused'):,} (full / regeneration).",
        "- Moved aside by the regeneration (RUN/_replaced/): " + ", ".join(result["replaced"]) + ".",
        "- Calls are the simulator's (`/sim/stats` by request key, reset before each build); the journal "
        "columns count the run's journal after the regeneration (sent in it / copied from the replaced "
        "journals). A stage's wall time runs from the previous rebuilt stage's marker to its own; "
        "ingest includes the start-up.",
        f"- Command: `benchmarks/bench_regenerate.py --size {size}"
        + (f" --pool {args.pool}`" if args.pool else "`")
        + ".",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=100_000, help=f"candidates (a multiple of {CHUNK})")
    parser.add_argument("--pool", type=Path, help="make or reuse the pool here, and keep it")
    parser.add_argument("--replicas", type=int, default=SIM_DEFAULTS["replicas"])
    parser.add_argument("--prefill-tps", type=float, default=SIM_DEFAULTS["prefill_tps"])
    parser.add_argument("--decode-tps", type=float, default=SIM_DEFAULTS["decode_tps"])
    parser.add_argument("--tmp", default=None, help="where the run (and a temporary pool) go")
    parser.add_argument("--write", type=Path, help="write the markdown section to this file")
    args = parser.parse_args()
    if args.size % CHUNK:
        parser.error(f"--size must be a multiple of {CHUNK}")
    args.sim_args = ["--replicas", str(args.replicas), "--prefill-tps", f"{args.prefill_tps:g}",
                     "--decode-tps", f"{args.decode_tps:g}"]  # fmt: skip
    with tempfile.TemporaryDirectory(dir=args.tmp, prefix="regenerate-") as tmp:
        work = Path(tmp)
        pool = prepare_pool(args.pool, work, args.size)
        commit = _commit()
        result = {"size": args.size, "commit": commit, **measure(pool, work, args.sim_args)}
        for name in ("full", "regen"):  # the logs outlive the temporary directory
            (Path("/tmp") / f"regenerate-{args.size}-{name}.log").write_text(
                (work / f"{name}.log").read_text()
            )
    print(json.dumps(result, default=str, indent=1))
    text = report(args.size, result, args)
    print(text)
    if args.write:
        args.write.write_text(text)


if __name__ == "__main__":
    main()
