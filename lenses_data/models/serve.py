"""Launch vLLM for a model role: build the `vllm serve` command(s), start them, wait for health.

vLLM is never imported here: it runs as a command (on a GPU node's vLLM install or in the pinned
`vllm/vllm-openai` image), so the pipeline's environment does not depend on it. A 38B (or 32B)
bf16 model fits on one H200, so a node with N GPUs runs N single-GPU replicas (data parallel),
each on its own port; the client balances across them (see docs/serving.md).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field

import httpx

from lenses_data.config.models import ModelsConfig, RoleConfig


@dataclass
class Replica:
    gpus: list[int]
    port: int
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def shell(self) -> str:
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return f"{prefix} {shlex.join(self.argv)}".strip()


def vllm_args(role: RoleConfig, tensor_parallel: int) -> list[str]:
    """Engine arguments shared by every replica of a role (model first, then flags)."""
    serve = role.serve
    args = [serve.hf_model or role.model, "--served-model-name", role.model, "--dtype", serve.dtype]
    args += ["--max-model-len", str(serve.max_model_len), "--max-num-seqs", str(serve.max_num_seqs)]
    args += ["--gpu-memory-utilization", f"{serve.gpu_memory_utilization:g}"]
    args += ["--tensor-parallel-size", str(tensor_parallel)]
    if serve.images_per_prompt:
        # JSON form (the key=value form was retired); no videos for these prompts.
        limits = {"image": serve.images_per_prompt, "video": 0}
        args += ["--limit-mm-per-prompt", json.dumps(limits, separators=(",", ":"))]
    if serve.enable_prefix_caching:
        # Tokens details: each answer's usage says how many prompt tokens the cache served
        # (usage.prompt_tokens_details.cached_tokens), so a deployment can see the cache work.
        args += ["--enable-prefix-caching", "--enable-prompt-tokens-details"]
    if serve.chat_template_content_format != "auto":
        # Pinned, not detected from the template: the client's image placeholder (RoleConfig.
        # image_placeholder) stays where it was written only in the "string" format.
        args += ["--chat-template-content-format", serve.chat_template_content_format]
    if serve.trust_remote_code:
        args.append("--trust-remote-code")
    if serve.revision:
        args += ["--revision", serve.revision]
    return args + list(serve.extra_args)


def plan_replicas(
    config: ModelsConfig, role_name: str, gpus: int, first_gpu: int = 0, docker: bool = False
) -> list[Replica]:
    """One replica per `gpus_per_replica` GPUs on this node, on consecutive ports."""
    role = config.role(role_name)
    per_replica = role.serve.gpus_per_replica
    if gpus < per_replica:
        raise ValueError(f"{role_name} needs {per_replica} GPU(s) per replica; --gpus {gpus} is too few")
    replicas = []
    for index in range(gpus // per_replica):
        devices = list(range(first_gpu + index * per_replica, first_gpu + (index + 1) * per_replica))
        port = role.serve.port + index
        engine = vllm_args(role, per_replica) + ["--host", "0.0.0.0", "--port", str(port)]
        visible = ",".join(str(d) for d in devices)
        if docker:
            argv = [
                "docker",
                "run",
                "--rm",
                "--gpus",
                f'"device={visible}"',
                "--ipc=host",
                "-p",
                f"{port}:{port}",
                "-v",
                f"{os.path.expanduser('~')}/.cache/huggingface:/root/.cache/huggingface",
                config.vllm_image,
                "--model",
                *engine,
            ]
            replicas.append(Replica(devices, port, argv))
        else:
            replicas.append(
                Replica(devices, port, ["vllm", "serve", *engine], {"CUDA_VISIBLE_DEVICES": visible})
            )
    return replicas


def wait_healthy(base_url: str, timeout_s: float, process: subprocess.Popen | None = None) -> list[str]:
    """Poll /health, then /v1/models; return the served model ids. Raises on timeout or exit."""
    root = base_url.removesuffix("/v1")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"server for {base_url} exited with code {process.returncode}")
        try:
            if httpx.get(f"{root}/health", timeout=5).status_code == 200:
                listing = httpx.get(f"{root}/v1/models", timeout=5).json()
                return [m["id"] for m in listing.get("data", [])]
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{base_url} not healthy after {timeout_s:.0f}s")


def launch(replicas: list[Replica], health_timeout_s: float) -> list[subprocess.Popen]:
    """Start every replica, wait until each answers /v1/models, print the endpoints."""
    if replicas and replicas[0].argv[0] == "vllm" and shutil.which("vllm") is None:
        raise FileNotFoundError("`vllm` is not on PATH: run on a vLLM node or use --docker (pinned image)")
    processes = [subprocess.Popen(r.argv, env={**os.environ, **r.env}) for r in replicas]
    try:
        for replica, process in zip(replicas, processes, strict=True):
            models = wait_healthy(replica.base_url, health_timeout_s, process)
            print(f"ready: {replica.base_url} serving {', '.join(models)}", flush=True)
    except BaseException:
        stop(processes)
        raise
    return processes


def stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
