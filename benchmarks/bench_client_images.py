"""Benchmark: how many filter requests (512 px JPEG attached, choice-constrained, journal on) the
model client sustains per second, against a bare AsyncOpenAI loop sending the same requests.

The simulator (`lenses simulate`, zero latency) runs in its own process, so every millisecond the
client spends is the coordinator's own cost. The requests are the filter stage's own
(`lenses_data.stages.filter.FilterStage.build_request`) over a pool of distinct 512 px JPEGs cut from the
packaged photographs (made here in a temporary directory, never committed). Variants run
interleaved, `--repeats` times each:

- bare: `AsyncOpenAI` + semaphore + `asyncio.gather`, reading and base64-encoding each image and
  sending the same body (Listing 1 text, the image, the choice constraint);
- client-journal: `ModelClient.run` inside `client.shard_journal(...)`, as the filter stage runs it;
- client-journal-fsync: the same with `models.journal.fsync` (group commits on a writer thread).

Reported: median requests/s and client CPU ms per request (`time.process_time` of this process,
which is robust to the machine's load), their ratios to the bare loop, and the simulator's CPU
per request (it shares the 2 cores).

    .venv/bin/python benchmarks/bench_client_images.py --requests 3000 --repeats 3
    .venv/bin/python benchmarks/bench_client_images.py --profile client-journal   # cProfile top 25
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import cProfile
import pstats
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import openai
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_rehearsal import CHUNK, make_chunk  # noqa: E402

from lenses_data.annotation.answers import parse_filter_answer  # noqa: E402
from lenses_data.config import PipelineConfig  # noqa: E402
from lenses_data.models.client import ModelClient, ModelRequest  # noqa: E402
from lenses_data.simulator.testing import sim_models_config, spawn_simulator  # noqa: E402
from lenses_data.stages.filter import FilterStage  # noqa: E402

VARIANTS = ("bare", "client-journal", "client-journal-fsync")


def make_images(root: Path, count: int) -> list[Path]:
    """`count` distinct 512 px JPEGs (the rehearsal's cuts of real photographs)."""
    for index in range(-(-count // CHUNK)):
        make_chunk((str(root), index))
    return sorted(root.glob("c*/img*.jpg"))[:count]


def filter_requests(images: list[Path], n: int, tag: str) -> list[ModelRequest]:
    """The filter stage's requests; the key carries `tag` so runs never replay each other."""
    requests, stage = [], FilterStage(PipelineConfig())
    for i in range(n):
        request = stage.build_request({"image_id": f"{tag}-{i}", "path": str(images[i % len(images)])})
        # Distinct text per run: a later run must not be answered from an earlier run's journal.
        requests.append(request.model_copy(update={"text": f"{request.text}\n[{tag} {i}]"}))
    return requests


async def bare_loop(url: str, requests: list[ModelRequest], concurrency: int) -> int:
    """What a stage would write with the openai package alone: read, encode, send, check."""
    limit = asyncio.Semaphore(concurrency)
    client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0, timeout=60)
    async with client:

        async def one(request: ModelRequest) -> bool:
            async with limit:
                data = await asyncio.to_thread(Path(request.image_path or "").read_bytes)
                uri = "data:image/jpeg;base64," + base64.b64encode(data).decode("ascii")
                content = [
                    {"type": "text", "text": request.text},
                    {"type": "image_url", "image_url": {"url": uri}},
                ]
                completion = await client.chat.completions.create(
                    model="test/filter",
                    messages=[{"role": "user", "content": content}],
                    temperature=0.0,
                    top_p=1.0,
                    max_tokens=1024,
                    n=1,
                    extra_body={"guided_choice": list(request.choice or [])},
                )
                return parse_filter_answer(completion.choices[0].message.content or "") in ("YES", "NO")

        answers = await asyncio.gather(*(one(r) for r in requests))
    return sum(answers)


def run_client(url: str, requests: list[ModelRequest], concurrency: int, fsync: bool) -> int:
    config = sim_models_config([url], timeout_s=60, concurrency=concurrency)
    journal = config.journal.model_copy(update={"enabled": True, "fsync": fsync})
    config = config.model_copy(update={"journal": journal, "progress_interval_s": 3600})
    with tempfile.TemporaryDirectory() as journal_dir:
        client = ModelClient.from_config(config, journal_dir=journal_dir)
        with client.shard_journal(Path(journal_dir) / "filter" / "part-00000.jsonl"):
            results = asyncio.run(client.run(requests, parse_filter_answer))
        client.close()
    return sum(r.ok for r in results)


def run_variant(
    variant: str, url: str, sim: psutil.Process, requests: list[ModelRequest], concurrency: int
) -> tuple[float, float, float]:
    """(requests/s, client CPU ms per request, simulator CPU ms per request)."""
    httpx.post(url.removesuffix("/v1") + "/sim/reset", timeout=5)
    sim_cpu = sum(sim.cpu_times()[:2])
    start, cpu_start = time.perf_counter(), time.process_time()
    if variant == "bare":
        ok = asyncio.run(bare_loop(url, requests, concurrency))
    else:
        ok = run_client(url, requests, concurrency, fsync=variant.endswith("fsync"))
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    sim_used = sum(sim.cpu_times()[:2]) - sim_cpu
    if ok != len(requests):
        raise RuntimeError(f"{variant}: only {ok}/{len(requests)} answers")
    n = len(requests)
    return n / elapsed, 1000 * cpu / n, 1000 * sim_used / n


def profile(url: str, images: list[Path], n: int, concurrency: int, variant: str) -> None:
    requests = filter_requests(images, n, "profile")
    profiler = cProfile.Profile()
    profiler.enable()
    if variant == "bare":
        asyncio.run(bare_loop(url, requests, concurrency))
    else:
        run_client(url, requests, concurrency, fsync=variant.endswith("fsync"))
    profiler.disable()
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats(150)


def bench(url: str, sim: psutil.Process, images: list[Path], args: argparse.Namespace) -> list[str]:
    variants = [v for v in VARIANTS if v in args.variants]
    rates: dict[str, list[float]] = {v: [] for v in variants}
    cpu: dict[str, list[float]] = {v: [] for v in variants}
    sim_cpu: dict[str, list[float]] = {v: [] for v in variants}
    for repeat in range(args.repeats):
        for variant in variants:  # interleaved: machine noise hits every variant alike
            requests = filter_requests(images, args.requests, f"{variant}-{repeat}")
            rate, ms, sim_ms = run_variant(variant, url, sim, requests, args.concurrency)
            rates[variant].append(rate)
            cpu[variant].append(ms)
            sim_cpu[variant].append(sim_ms)
            print(
                f"{variant:22s} run {repeat}: {rate:6.0f} req/s, client {ms:.2f} CPU ms/req, "
                f"simulator {sim_ms:.2f} CPU ms/req",
                flush=True,
            )
    base = "bare" if "bare" in variants else variants[0]
    base_rate, base_cpu = statistics.median(rates[base]), statistics.median(cpu[base])
    rows = []
    for variant in variants:
        rate, ms = statistics.median(rates[variant]), statistics.median(cpu[variant])
        rows.append(
            f"| {variant} | {rate:.0f} | {max(rates[variant]):.0f} | {rate / base_rate:.2f} | {ms:.2f} | "
            f"{base_cpu / ms:.2f} | {1000 / ms:.0f} | {ms * 1e6 / 60000:.0f} | "
            f"{statistics.median(sim_cpu[variant]):.2f} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--images", type=int, default=500, help="distinct JPEGs (cycled)")
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--profile", choices=VARIANTS, help="cProfile one run of this variant instead")
    parser.add_argument("--out", type=Path, help="write the markdown table here too")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: stop the simulator in `finally`
    with tempfile.TemporaryDirectory() as directory:
        images = make_images(Path(directory), args.images)
        mean_kb = sum(p.stat().st_size for p in images) / len(images) / 1024
        process, url = spawn_simulator([])
        try:
            if args.profile:
                profile(url, images, args.requests, args.concurrency, args.profile)
                return
            rows = bench(url, psutil.Process(process.pid), images, args)
        finally:
            process.terminate()
            process.wait(timeout=10)
    header = [
        f"{args.requests} filter requests per run ({len(images)} distinct 512 px JPEGs, mean {mean_kb:.0f} KiB), "
        f"concurrency {args.concurrency}, zero-latency simulator in its own process, "
        f"median of {args.repeats} interleaved runs.",
        "",
        "| variant | req/s median | req/s best | ratio to bare | client CPU ms/req | CPU-efficiency vs bare "
        "| req/s per client core | CPU-min per 1M | simulator CPU ms/req |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    table = "\n".join(header + rows)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
