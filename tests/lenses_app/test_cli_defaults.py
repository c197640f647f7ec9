"""Process-wide settings are chosen by the CLI entry point, never by library code."""

from __future__ import annotations

import subprocess
import sys

from lenses_app.cli import apply_safe_prefect_defaults


def test_cli_defaults_fill_only_what_the_user_left_unset():
    environ = {"ARROW_DEFAULT_MEMORY_POOL": "system"}
    apply_safe_prefect_defaults(environ)
    assert environ["ARROW_DEFAULT_MEMORY_POOL"] == "system"
    assert environ["DO_NOT_TRACK"] == "1"
    assert environ["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"


def test_the_cli_defaults_give_arrow_jemalloc_when_set_before_pyarrow_loads():
    script = (
        "from lenses_app.cli import apply_safe_prefect_defaults\n"
        "apply_safe_prefect_defaults()\n"
        "import pyarrow as pa\n"
        "print(pa.default_memory_pool().backend_name)\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "jemalloc"
