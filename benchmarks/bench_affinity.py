"""Benchmark: what image affinity costs in throughput and what it buys in prefix-cache hits.

The endpoint pool sends the requests of one image to the replica that served it last and waits
for a free slot there (`EndpointPool`), instead of the least-loaded replica. Waiting can leave
slots elsewhere idle: this measures how much, against plain least-outstanding balancing, in the
same process, variants interleaved.

Set-up: `--servers` simulators (`lenses simulate`, each its own process, `--slots` replicas that
serve one request at a time, a token latency model that charges the whole prompt, so the cache's
saving does not show as time here); the generate stage's own requests (`GenerateStage.build_request`)
for `--images` distinct 512 px JPEGs x 2 kinds x `--answers` answers, in the stage's order; the
client with `max_concurrency = --slots` per endpoint. Every server's prefix cache is emptied
(`/sim/reset`) before each measurement.

Reported per variant: median requests/s, its ratio to least-outstanding, the share of (image,
kind) pairs whose answers one server served (from the keys each simulator saw: only then can a
later answer find the image in that server's prefix cache), and the share of prompt units the
caches served (`cached_tokens`).

    .venv/bin/python benchmarks/bench_affinity.py --images 150 --servers 4 --slots 2 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_client_images import make_images  # noqa: E402

from lenses_data.config import PipelineConfig  # noqa: E402
from lenses_data.config.annotate import AnnotateConfig  # noqa: E402
from lenses_data.models.client import ModelClient, ModelRequest, ModelResult  # noqa: E402
from lenses_data.simulator.testing import sim_models_config, sim_stats, spawn_simulator  # noqa: E402
from lenses_data.stages.generate import GenerateStage  # noqa: E402

VARIANTS = ("least-outstanding", "affinity")


def stage_requests(images: list[Path], answers: int, tag: str) -> list[ModelRequest]:
    """The generate stage's requests for these images, in its order (kind, then image, answer)."""
    stage = GenerateStage(PipelineConfig(annotate=AnnotateConfig(candidates_per_image=answers)))
    rows = [{"image_id": f"{tag}-{i}", "path": str(path)} for i, path in enumerate(images)]
    return [stage.build_request(unit) for unit in stage.units(rows)]


def run_variant(
    variant: str, urls: list[str], requests: list[ModelRequest], slots: int
) -> tuple[float, list]:
    """(requests/s, results); least-outstanding is `models.generator.image_affinity: false`."""
    for url in urls:
        httpx.post(url.removesuffix("/v1") + "/sim/reset", timeout=5)
    config = sim_models_config(urls, timeout_s=120, concurrency=slots)
    config = config.with_role("generator", image_affinity=variant == "affinity")
    client = ModelClient(config.model_copy(update={"progress_interval_s": 3600}))
    start = time.perf_counter()
    results = client.run_sync(requests, lambda raw: raw)
    elapsed = time.perf_counter() - start
    failed = [r for r in results if not r.ok]
    if failed:
        raise RuntimeError(f"{variant}: {len(failed)} failed, first {failed[0].error_message}")
    return len(requests) / elapsed, results


def placement(urls: list[str], requests: list[ModelRequest]) -> float:
    """Share of (image, kind) pairs whose answers were all served by one server, from the keys
    each simulator saw (only then can a later answer find the image in that server's cache)."""
    server_of: dict[str, set[int]] = {}
    for index, url in enumerate(urls):
        for key in sim_stats(url)["keys"].values():
            server_of.setdefault(key.rsplit(":", 1)[0], set()).add(index)
    pairs = {request.key.rsplit(":", 1)[0] for request in requests}
    return sum(len(server_of.get(pair, ())) == 1 for pair in pairs) / len(pairs)


def cached_share(results: list[ModelResult]) -> float:
    """Share of prompt units the servers' prefix caches served (the simulator counts words, and an
    image as one unit: the instructions dominate; on vLLM the image is ~1,800 of ~2,000 tokens)."""
    cached = sum(r.usage.get("cached_tokens", 0) for r in results)
    return cached / max(1, sum(r.usage["prompt_tokens"] for r in results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=150)
    parser.add_argument("--answers", type=int, default=2, help="answers per image and kind")
    parser.add_argument("--servers", type=int, default=4)
    parser.add_argument("--slots", type=int, default=2, help="replicas per server = requests in flight each")
    parser.add_argument("--prefill-tps", type=float, default=20000.0)
    parser.add_argument("--decode-tps", type=float, default=2500.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    latency = ["--replicas", str(args.slots), "--prefill-tps", str(args.prefill_tps)]
    latency += ["--decode-tps", str(args.decode_tps)]
    servers = [spawn_simulator(latency) for _ in range(args.servers)]
    urls = [url for _, url in servers]
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    shares: dict[str, tuple[float, float]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            images = make_images(Path(tmp), args.images)
            # One discarded round first: the process's first run pays one-off imports and set-up.
            run_variant("affinity", urls, stage_requests(images[:20], args.answers, "warm"), args.slots)
            for repeat in range(args.repeats):
                for variant in VARIANTS:
                    requests = stage_requests(images, args.answers, f"{variant}-{repeat}")
                    rate, results = run_variant(variant, urls, requests, args.slots)
                    rates[variant].append(rate)
                    shares[variant] = (placement(urls, requests), cached_share(results))
                    print(f"{variant:18s} repeat {repeat}: {rate:7.1f} req/s", flush=True)
    finally:
        for process, _ in servers:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    n = len(stage_requests(images, args.answers, "n"))
    print(f"\n{n} requests, {args.servers} servers x {args.slots} slots, median of {args.repeats}")
    print("| variant | requests/s | ratio | (image, kind) answered on one server | cached prompt units |")
    print("|---|---:|---:|---:|---:|")
    base = statistics.median(rates["least-outstanding"])
    for variant in VARIANTS:
        rate = statistics.median(rates[variant])
        together, cached = shares[variant]
        print(f"| {variant} | {rate:.1f} | {rate / base:.3f} | {together:.0%} | {cached:.0%} |")


if __name__ == "__main__":
    main()
