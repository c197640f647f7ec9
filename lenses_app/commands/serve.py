"""`lenses serve`: launch vLLM for a model role (or print the exact commands with --dry-run)."""

from __future__ import annotations

import argparse
import sys

ROLE_CHOICES = ("filter", "generator", "validator", "visual_validator")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="launch vLLM for a model role and wait until it is healthy",
        description="Build the `vllm serve` command for a role from the config (model, --max-model-len, "
        "--limit-mm-per-prompt, --gpu-memory-utilization, tensor-parallel size), one single-GPU replica "
        "per GPU on consecutive ports, start them, wait for /health and /v1/models, and print the "
        "endpoints. vLLM is run as a command (or in the pinned Docker image), never imported.",
    )
    parser.add_argument("--role", required=True, choices=ROLE_CHOICES, help="model role to serve")
    parser.add_argument("--config", help="pipeline YAML config (default: built-in defaults)")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs on this node to use (default 1)")
    parser.add_argument("--first-gpu", type=int, default=0, help="index of the first GPU to use")
    parser.add_argument("--docker", action="store_true", help="run the pinned vllm/vllm-openai image")
    parser.add_argument("--dry-run", action="store_true", help="print the commands and the endpoints only")
    parser.add_argument("--health-timeout", type=float, default=1800.0, help="seconds to wait for health")
    parser.set_defaults(func=handle)


def _models_config(path: str | None):
    if path is None:
        from lenses_data.config.models import ModelsConfig

        return ModelsConfig()
    from lenses_data.config import load_config

    return load_config(path).models


def handle(args: argparse.Namespace) -> int:
    from lenses_data.models.serve import launch, plan_replicas, stop

    config = _models_config(args.config)
    replicas = plan_replicas(config, args.role, args.gpus, args.first_gpu, docker=args.docker)
    role = config.role(args.role)
    print(f"# vLLM {config.vllm_version} for role {args.role}: {role.model}, {len(replicas)} replica(s)")
    for replica in replicas:
        print(replica.shell())
    urls = ", ".join(f'"{r.base_url}"' for r in replicas)
    print(f"# config: models.{args.role}.base_urls: [{urls}]  (replace 127.0.0.1 with this node's address)")
    if args.dry_run:
        return 0
    try:
        processes = launch(replicas, args.health_timeout)
    except (FileNotFoundError, RuntimeError, TimeoutError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        for process in processes:
            process.wait()
    except KeyboardInterrupt:
        stop(processes)
    return max((p.returncode or 0) for p in processes)
