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
