"""Repository-wide checks: ruff clean and formatted, no lenses_data or lenses_app module imports torch or Prefect, CLI
help is true."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_ruff_is_clean():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent))
    if ruff is None:
        pytest.skip("ruff is not installed (dev extra)")
    result = subprocess.run(
        [ruff, "check", "lenses_data", "lenses_app", "flows", "training", "tests", "benchmarks"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-4000:]


def test_python_files_are_ruff_formatted():
    """`ruff format` leaves every tracked Python file as it is (formatting drift makes merges noisy)."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent))
    if ruff is None:
        pytest.skip("ruff is not installed (dev extra)")
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO_ROOT, capture_output=True, text=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    result = subprocess.run(
        [ruff, "format", "--check", *tracked.stdout.split()], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout[-4000:]


HEAVY_MODULES = ("torch", "prefect", "transformers", "open_clip", "faiss")

# Imports every lenses_data and lenses_app module in turn, then builds the CLI parser; prints
# "<step> <heavy modules>" at the first step after which a heavy module is loaded, and last the number
# of modules imported.
_IMPORT_EVERY_MODULE = """
import importlib, pkgutil, sys
import lenses_app, lenses_data
heavy = sys.argv[1].split(",")
names = [info.name for info in pkgutil.walk_packages(lenses_data.__path__, "lenses_data.")]
names += [info.name for info in pkgutil.walk_packages(lenses_app.__path__, "lenses_app.")]
steps = [(name, lambda name=name: importlib.import_module(name)) for name in names]
steps.append(("lenses_app.cli.build_parser()", lambda: sys.modules["lenses_app.cli"].build_parser()))
for step, run in steps:
    run()
    loaded = [m for m in heavy if m in sys.modules]
    if loaded:
        print(step, ",".join(loaded))
        break
print(len(names))
"""


def test_every_lenses_data_module_imports_without_torch_or_prefect():
    """`lenses_data` (and the CLI of `lenses_app` above it) is the light half: torch, Prefect and model libraries are imported inside the
    functions that need them, so `lenses` commands and the stages start fast on a CPU box."""
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_EVERY_MODULE, ",".join(HEAVY_MODULES)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    *culprit, count = result.stdout.splitlines()
    assert not culprit, f"{culprit[0]}: loaded by this step (a top-level import in it or in what it imports)"
    modules = sum(1 for top in ("lenses_data", "lenses_app") for _ in (REPO_ROOT / top).rglob("*.py"))
    assert int(count) + 2 == modules  # every file was imported (+2: the two __init__.py themselves)


def test_every_listed_command_answers_help():
    from lenses_app.cli import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # argparse keeps subcommands here
    assert {
        "sample",
        "ingest",
        "dedupe",
        "split",
        "filter",
        "generate",
        "rules",
        "validate",
        "visual-validate",
        "export",
        "report",
        "run",
        "simulate",
        "serve",
        "train",
        "encode",
        "evaluate",
    } <= set(commands)
    for name in commands:
        result = subprocess.run(
            [sys.executable, "-m", "lenses_app.cli", name, "--help"],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
        )
        assert result.returncode == 0, (name, result.stderr[-2000:])
        assert "usage: lenses" in result.stdout


def _make_plan(target: str, home: Path) -> str:
    """What `make -n TARGET` would run on a machine whose HOME is `home` (nothing built yet: the
    checkout's own .venv is pointed at a missing folder so its stamps count as absent)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home)}
    missing_venv = home / "no-venv"
    result = subprocess.run(
        ["make", "-n", target, f"VENV={missing_venv}"], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_make_test_builds_the_vllm_env_on_a_fresh_machine(tmp_path: Path):
    """`make test` with an empty HOME plans the vLLM venv's install before pytest (the rule once named
    $(VLLM_STAMP) before the variable was defined, so make expanded it to nothing and a fresh machine
    never built the venv: every tests/realvllm test errored)."""
    plan = _make_plan("test", tmp_path).splitlines()
    vllm_venv = tmp_path / ".cache" / "lenses"
    install = [i for i, line in enumerate(plan) if str(vllm_venv) in line and "pip install" in line]
    assert install, "make test does not install the vLLM venv on a fresh HOME:\n" + "\n".join(plan)
    pytest_line = next(i for i, line in enumerate(plan) if "-m pytest" in line)
    assert max(install) < pytest_line, "the vLLM venv is installed after pytest starts"
    assert any(line.startswith("touch ") and ".lenses-vllm-installed" in line for line in plan)
    # pytest leaves with its status, past the teardown CI once saw segfault (tests/test_suite_exit.py)
    assert "LENSES_TEST_FAST_EXIT=1" in plan[pytest_line] and "PYTHONFAULTHANDLER=1" in plan[pytest_line]


def test_make_run_does_not_build_the_vllm_env(tmp_path: Path):
    """The run command needs only the pipeline's venv (the simulator answers): no 6 GB vLLM install."""
    plan = _make_plan("run", tmp_path)
    assert "lenses run --sample" in plan
    assert ".cache/lenses/vllm" not in plan
