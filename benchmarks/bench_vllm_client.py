"""Benchmark: the model client against a bare AsyncOpenAI loop, both on vLLM itself (CPU build).

The server is a real vLLM 0.32 (`make vllm-env`) serving the tests' tiny models, so what is measured
is the client's cost on top of a real server's answers: rendering, the probe, affinity, journal,
parsing. Both sides send the same bodies at the same concurrency: YES/NO questions under vLLM's
choice constraint (short, always-terminating answers, so the server's decode time is small and the
client's overhead is as visible as it can be on this machine), text-only on the tiny Qwen2 and with
a real photograph on the tiny InternVL. Variants run interleaved, `--repeats` times; the table has
the median throughput and its ratio to the bare loop.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_vllm_client.py --requests 60 --concurrency 8 --repeats 2
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import statistics
import tempfile
import time
from pathlib import Path

from lenses_data.config.roles import ROLES
from lenses_data.models.client import ModelClient, ModelRequest
from lenses_data.models.endpoints import make_openai_client
from lenses_data.models.parsing import parse_choice
from tests.realvllm.pipeline_config import HF_INTERNVL_PLACEHOLDER, models_section
from tests.realvllm.tiny_models import tiny_model
from tests.realvllm.vllm_server import VllmServer, start_server, stop_server, vllm_python

CHOICES = ["YES", "NO"]
QUESTION = "Does this image admit clearly different non-literal interpretations? Answer YES or NO."


def _image_file(folder: Path) -> Path:
    from PIL import Image
    from skimage import data

    path = folder / "astronaut.jpg"
    Image.fromarray(data.astronaut()).resize((256, 256)).save(path, quality=90)
    return path


def _requests(n: int, tag: str, role: str, image: Path | None) -> list[ModelRequest]:
    return [
        ModelRequest(
            key=f"{tag}:{i}",
            role=role,
            text=QUESTION,
            image_path=str(image) if image else None,
            after_image_text=f"Candidate {tag}-{i}.",
            choice=CHOICES,
        )
        for i in range(n)
    ]


async def bare_loop(server: VllmServer, requests: list[ModelRequest], concurrency: int) -> int:
    """What a stage would do with the openai package alone: same messages, same constraint."""
    limit = asyncio.Semaphore(concurrency)
    client = make_openai_client(server.base_url, "x", 300, concurrency)
    cache: dict[str, str] = {}

    def uri(path: str) -> str:
        if path not in cache:
            cache[path] = "data:image/jpeg;base64," + base64.b64encode(Path(path).read_bytes()).decode()
        return cache[path]

    async def one(request: ModelRequest) -> bool:
        content: object = f"{request.text}\n\n{request.after_image_text}"
        if request.image_path:
            content = [
                {"type": "text", "text": request.text},
                {"type": "text", "text": HF_INTERNVL_PLACEHOLDER},
                {"type": "image_url", "image_url": {"url": uri(request.image_path)}},
                {"type": "text", "text": request.after_image_text},
            ]
        async with limit:
            completion = await client.chat.completions.create(
                model=server.served_model_name,
                messages=[{"role": "user", "content": content}],
                temperature=0.0,
                max_tokens=8,
                extra_body={"structured_outputs": {"choice": CHOICES}},
            )
        return completion.choices[0].message.content in CHOICES

    async with client:
        answers = await asyncio.gather(*(one(r) for r in requests))
    return sum(answers)


def run_variant(
    variant: str, servers: dict[str, VllmServer], role: str, requests: list[ModelRequest], concurrency: int
) -> float:
    server = servers["validator" if role == "validator" else "internvl"]
    start = time.perf_counter()
    if variant == "bare":
        ok = asyncio.run(bare_loop(server, requests, concurrency))
    else:
        from lenses_data.config.models import ModelsConfig

        section = models_section(servers["internvl"], servers["validator"])
        for name in ROLES:
            section[name].update(max_concurrency=concurrency, sampling={"max_tokens": 8})
            section[name].pop("mm_processor_kwargs", None)  # the bare loop sends none either
        config = ModelsConfig.model_validate({**section, "progress_interval_s": 3600})
        with tempfile.TemporaryDirectory() as journal_dir:
            client = ModelClient.from_config(config, journal_dir=journal_dir)
            with client.shard_journal(Path(journal_dir) / role / "part-00000.jsonl"):
                results = asyncio.run(client.run(requests, parse_choice(CHOICES)))
            client.close()
        ok = sum(r.ok for r in results)
    elapsed = time.perf_counter() - start
    if ok != len(requests):
        raise RuntimeError(f"{variant}: only {ok}/{len(requests)} answers")
    return len(requests) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    python = vllm_python()
    if python is None:
        raise SystemExit("no vLLM venv: run `make vllm-env` first")
    folder = Path(tempfile.mkdtemp(prefix="bench-vllm-"))
    servers = {
        "validator": start_server(python, tiny_model("validator"), "tiny-qwen2-validator", folder / "v.log"),
        "internvl": start_server(
            python, tiny_model("internvl"), "tiny-internvl", folder / "i.log", multimodal=True
        ),
    }
    image = _image_file(folder)
    rows = []
    try:
        for role, picture in (("validator", None), ("filter", image)):
            rates: dict[str, list[float]] = {"bare": [], "client": []}
            for repeat in range(args.repeats):
                for variant in rates:  # interleaved: machine noise hits both alike
                    tag = f"{variant}-{repeat}"  # distinct texts: the server's prefix cache stays fair
                    requests = _requests(args.requests, tag, role, picture)
                    rate = run_variant(variant, servers, role, requests, args.concurrency)
                    rates[variant].append(rate)
                    print(f"{role:9s} {variant:6s} run {repeat}: {rate:6.1f} req/s", flush=True)
            bare, ours = statistics.median(rates["bare"]), statistics.median(rates["client"])
            kind = "text, Qwen2" if picture is None else "256 px JPEG, InternVL"
            rows.append(f"| {kind} | {bare:.1f} | {ours:.1f} | {ours / bare:.2f} |")
    finally:
        for server in servers.values():
            stop_server(server)
    print(
        f"\n{args.requests} YES/NO requests per run, concurrency {args.concurrency}, median of {args.repeats}"
    )
    print("| requests | bare AsyncOpenAI req/s | client req/s | ratio (client / bare) |")
    print("|---|---:|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
