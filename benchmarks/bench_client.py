"""Benchmark: the model client's throughput against a bare AsyncOpenAI + asyncio.gather loop.

The simulator runs in its own process (so it does not share our event loop) with a fixed latency.
Both sides send the same schema-constrained requests at the same concurrency and validate the
answers with pydantic; ours additionally journals every answer (SQLite WAL or JSONL), balances
endpoints and counts retries. Variants run interleaved, `--repeats` times each; we report the
median throughput and its ratio to the bare loop, and the simulator's max requests in flight.

    .venv/bin/python benchmarks/bench_client.py --latency 0.05 0.5 --requests 3000 --concurrency 256
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import openai
from pydantic import BaseModel, Field

from lenses_data.models.client import ModelClient, ModelRequest
from lenses_data.models.endpoints import make_openai_client
from lenses_data.models.parsing import parse_model
from lenses_data.simulator.testing import sim_models_config, sim_stats, spawn_simulator


class Caption(BaseModel):
    category: str
    caption: str
    focus: str


class Captions(BaseModel):
    captions: list[Caption] = Field(min_length=2, max_length=3)


INSTRUCTIONS = "Write two or three captions for the harbour scene, each under one lens, as JSON."
VARIANTS = ("bare", "bare-pooled", "client-nojournal", "client-journal", "client-journal-fsync")


def _requests(n: int, tag: str) -> list[ModelRequest]:
    schema = Captions.model_json_schema()
    return [
        ModelRequest(
            key=f"{tag}:{i}",
            role="generator",
            text=INSTRUCTIONS,
            after_image_text=f"{tag} image {i}",
            json_schema=schema,
        )
        for i in range(n)
    ]


async def bare_loop(url: str, requests: list[ModelRequest], concurrency: int, pooled: bool) -> int:
    """The baseline: what a stage would do with the openai package alone. `pooled` gives it the
    same connection pool as our client (keep-alive for every request in flight), so the ratio
    to it is our client's own overhead; the default pool keeps only 100 connections alive."""
    limit = asyncio.Semaphore(concurrency)
    parse = parse_model(Captions)
    if pooled:
        client = make_openai_client(url, "x", 60, concurrency)
    else:
        client = openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0, timeout=60)
    async with client:

        async def one(request: ModelRequest) -> bool:
            async with limit:
                completion = await client.chat.completions.create(
                    model="test/generator",
                    messages=[{"role": "user", "content": f"{request.text}\n\n{request.after_image_text}"}],
                    temperature=0.0,
                    top_p=1.0,
                    max_tokens=1024,
                    n=1,
                    response_format={
                        "type": "json_schema",
                        "json_schema": {"name": "Captions", "schema": request.json_schema},
                    },
                )
                return parse(completion.choices[0].message.content) is not None

        answers = await asyncio.gather(*(one(r) for r in requests))
    return sum(answers)


def run_variant(
    variant: str, url: str, requests: list[ModelRequest], concurrency: int
) -> tuple[float, int, float]:
    """(requests per second, simulator's max in flight, client CPU ms per request)."""
    httpx.post(url.removesuffix("/v1") + "/sim/reset", timeout=5)
    start, cpu_start = time.perf_counter(), time.process_time()
    if variant.startswith("bare"):
        ok = asyncio.run(bare_loop(url, requests, concurrency, pooled=variant == "bare-pooled"))
    else:
        config = sim_models_config([url], timeout_s=60, concurrency=concurrency)
        journal = config.journal.model_copy(
            update={"enabled": variant != "client-nojournal", "fsync": variant.endswith("fsync")}
        )
        config = config.model_copy(update={"journal": journal, "progress_interval_s": 3600})
        with tempfile.TemporaryDirectory() as journal_dir:
            client = ModelClient.from_config(config, journal_dir=journal_dir)
            # As a stage does it: every answer of the shard goes to that shard's own journal file.
            with client.shard_journal(Path(journal_dir) / "generate" / "part-00000.jsonl"):
                results = asyncio.run(client.run(requests, parse_model(Captions)))
            client.close()
        ok = sum(r.ok for r in results)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    if ok != len(requests):
        raise RuntimeError(f"{variant}: only {ok}/{len(requests)} answers")
    return len(requests) / elapsed, sim_stats(url)["max_in_flight"], 1000 * cpu / len(requests)


def bench_latency(latency: float, n: int, concurrency: int, repeats: int) -> list[str]:
    process, url = spawn_simulator(["--latency", str(latency)])
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpu_ms: dict[str, list[float]] = {v: [] for v in VARIANTS}
    in_flight: dict[str, int] = dict.fromkeys(VARIANTS, 0)
    try:
        for repeat in range(repeats):
            for variant in VARIANTS:  # interleaved, so machine noise hits every variant alike
                rate, peak, cpu = run_variant(variant, url, _requests(n, f"{variant}-{repeat}"), concurrency)
                rates[variant].append(rate)
                cpu_ms[variant].append(cpu)
                in_flight[variant] = max(in_flight[variant], peak)
                print(
                    f"latency {latency}s {variant:20s} run {repeat}: {rate:7.1f} req/s, {cpu:.2f} CPU ms/req, "
                    f"peak {peak}",
                    flush=True,
                )
    finally:
        process.terminate()
        process.wait(timeout=10)
    return [_row(latency, v, rates, cpu_ms, in_flight) for v in VARIANTS]


def _row(latency: float, variant: str, rates: dict, cpu_ms: dict, in_flight: dict) -> str:
    """Median and best-of-N throughput (best = least disturbed by other load on the machine),
    their ratios to the bare loop, and client CPU per request (robust to machine load)."""
    median, best = statistics.median(rates[variant]), max(rates[variant])
    base_median, base_best = statistics.median(rates["bare"]), max(rates["bare"])
    cpu, base_cpu = statistics.median(cpu_ms[variant]), statistics.median(cpu_ms["bare"])
    return (
        f"| {latency:g} | {variant} | {median:.0f} | {best:.0f} | {median / base_median:.2f} | "
        f"{best / base_best:.2f} | {cpu:.2f} | {base_cpu / cpu:.2f} | {in_flight[variant]} |"
    )


def bench_journal_puts(n: int = 1000) -> list[str]:
    """Cost of one durable write to a shard's journal, in the calling thread (what the event loop
    pays per answer when writing inline)."""
    from lenses_data.models.journal import JournalEntry, ShardJournal

    raw = json.dumps({"captions": [{"category": "Literal", "caption": "word " * 15, "focus": "a b"}] * 3})
    rows = ["| journal | fsync | µs per answer |", "|---|---|---|"]
    for backend in ("shard-jsonl",):
        for fsync in (False, True):
            with tempfile.TemporaryDirectory() as directory:
                journal = ShardJournal(Path(directory) / "part-00000.jsonl", fsync)
                start = time.perf_counter()
                for i in range(n):
                    journal.get(f"h{i}")
                    journal.put(
                        JournalEntry(
                            hash=f"h{i}",
                            key=f"k{i}",
                            role="generator",
                            model="m",
                            status="ok",
                            raw=raw,
                            usage={"prompt_tokens": 10},
                        )
                    )
                elapsed = time.perf_counter() - start
                journal.close()
            rows.append(f"| {backend} | {fsync} | {1e6 * elapsed / n:.0f} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, nargs="+", default=[0.05, 0.5])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, help="write the markdown table here too")
    args = parser.parse_args()
    # SIGTERM unwinds normally, so the simulator subprocess is stopped in `finally`.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    header = [
        f"{args.requests} schema-constrained requests per run, concurrency {args.concurrency}, "
        f"median of {args.repeats} interleaved runs; simulator in its own process.",
        "",
        "| latency (s) | variant | req/s median | req/s best | ratio to bare (median) | ratio to bare (best) "
        "| client CPU ms/req | CPU-efficiency vs bare | max in flight |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rows = [
        row
        for latency in args.latency
        for row in bench_latency(latency, args.requests, args.concurrency, args.repeats)
    ]
    table = "\n".join(
        header
        + rows
        + ["", "Journal write cost (lookup + durable write, inline):", ""]
        + bench_journal_puts()
    )
    print(table)
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
