"""Mutation score of one module of the reliability core: `make mutation MODULE=lenses_data/models/systemic.py`.

mutmut 3 (settings shared by every module: `[tool.mutmut]` in pyproject.toml) mutates the one module
and runs, for each mutant, the fast tests below that cover the mutated function. One worker: the
machine it was made on has 2 cores shared with others. The run starts from an empty `mutants/`, so
the score it prints is the module's whole score, not what is left of an earlier run.

The score counts a mutant killed when a test failed or timed out on it. Mutants that are equivalent
(no test could tell them from the original; each one named with its reason in docs/testing.md, in a
table row "| `name` | equivalent | why |") are left out of the denominator; mutants with no covering
test count as survivors.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import socket
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "testing.md"
FAST = ["-m", "not slow"]
MODELS = "tests/lenses_data/models"
# The one client test that starts a Prefect server (12 s a mutant); it tests keys.py's Secret block.
NO_SECRET_BLOCK = [
    "--deselect",
    f"{MODELS}/test_client_inputs.py::test_api_key_from_a_saved_prefect_secret_block_reaches_the_server",
]

# The fast tests that exercise each module (the ones that decide what is lost or doubled).
TESTS: dict[str, list[str]] = {
    "lenses_data/models/systemic.py": [
        f"{MODELS}/test_systemic.py",
        f"{MODELS}/test_client_faults.py",
        f"{MODELS}/test_client_outage.py",
    ],
    "lenses_data/models/journal.py": [
        f"{MODELS}/test_journal.py",
        f"{MODELS}/test_journal_readers.py",
        f"{MODELS}/test_journal_file.py",
        f"{MODELS}/test_journal_kill.py",
    ],
    "lenses_data/models/client.py": [
        f"{MODELS}/test_client_units.py",
        f"{MODELS}/test_client_counts.py",
        f"{MODELS}/test_client_faults.py",
        f"{MODELS}/test_client_outage.py",
        f"{MODELS}/test_client_inputs.py",
        f"{MODELS}/test_requests_shape.py",
        f"{MODELS}/test_probe.py",
        *NO_SECRET_BLOCK,
    ],
    "lenses_data/models/calls.py": [
        f"{MODELS}/test_calls_units.py",
        f"{MODELS}/test_calls_wire.py",
        f"{MODELS}/test_client_faults.py",
        f"{MODELS}/test_client_outage.py",
        f"{MODELS}/test_client_inputs.py",
        f"{MODELS}/test_journal.py",
        *NO_SECRET_BLOCK,
    ],
    "lenses_data/models/endpoints.py": [
        f"{MODELS}/test_backoff.py",
        f"{MODELS}/test_endpoints.py",
        f"{MODELS}/test_endpoint_affinity.py",
        f"{MODELS}/test_endpoint_readmit.py",
        f"{MODELS}/test_endpoint_units.py",
    ],
    "lenses_data/models/dialect.py": [
        f"{MODELS}/test_dialect.py",
        f"{MODELS}/test_production_serving.py",
        f"{MODELS}/test_requests_shape.py",
    ],
    "lenses_data/models/probe.py": [
        f"{MODELS}/test_probe.py",
        f"{MODELS}/test_probe_context.py",
        f"{MODELS}/test_probe_report.py",
        f"{MODELS}/test_probe_units.py",
        f"{MODELS}/test_probe_waits.py",
        f"{MODELS}/test_client_outage.py",
        f"{MODELS}/test_endpoint_readmit.py",
        f"{MODELS}/test_prefix_cache.py",
    ],
    "lenses_data/models/parsing.py": [f"{MODELS}/test_parsing.py", f"{MODELS}/test_parsing_edges.py"],
    "lenses_data/runlock.py": ["tests/lenses_data/test_runlock.py"],
    "lenses_data/stages/settings_guard.py": [
        "tests/lenses_data/stages/test_settings_guard.py",
        "tests/lenses_data/stages/test_settings_guard_runs.py",
    ],
    # Every stage runs through the base: all the stage tests but the export's Hugging Face layout.
    "lenses_data/stages/base.py": [
        "tests/lenses_data/stages",
        "--ignore",
        "tests/lenses_data/stages/test_hf_dataset.py",
    ],
    "flows/worker_stages.py": ["tests/flows/test_worker_stages.py", "tests/flows/test_worker_stage_cache.py"],
    # Prefect flow code: its tests are flow runs (marked slow), run against one Prefect server for the
    # whole mutation run instead of a test harness started per mutant (`FLOW_MODULES`).
    "flows/stages.py": [
        "tests/flows/test_worker_stages.py",
        "tests/flows/test_retries.py",
        "tests/flows/test_stage_flows.py",
    ],
}

# Flow modules: their selected tests include slow ones (flow runs; the others run the fast tests
# only), and one `prefect server start` serves every mutant (tests/conftest.py's `prefect_harness`
# uses LENSES_TEST_PREFECT_API_URL when it is set).
FLOW_MODULES = {"flows/stages.py"}

KILLED = {"killed", "timeout", "segfault", "caught by type check"}


def equivalent_mutants(module: str) -> set[str]:
    """Mutant names docs/testing.md lists as equivalent for this module."""
    prefix = module.removesuffix(".py").replace("/", ".") + "."
    if not DOC.exists():
        return set()
    names = re.findall(r"^\| `([^`]+__mutmut_\d+)` \| equivalent \|", DOC.read_text(), flags=re.M)
    return {name for name in names if name.startswith(prefix)}


def run_mutmut(module: str, fresh: bool, names: list[str] | None = None) -> None:
    """Mutate `module` only and run mutmut in this process with one worker.

    `names`: rerun only these mutants, with the tests' coverage collected again (so tests added since
    the last run are tried on them); every other mutant keeps its verdict."""
    from mutmut import __main__ as mutmut_main
    from mutmut.configuration import config

    settings = config()
    settings.only_mutate = [module]
    settings.pytest_add_cli_args_test_selection = [*TESTS[module], *([] if module in FLOW_MODULES else FAST)]
    if fresh:
        shutil.rmtree("mutants", ignore_errors=True)
    if names:
        Path("mutants/mutmut-stats.json").unlink(missing_ok=True)
    with prefect_api(module in FLOW_MODULES):
        mutmut_main._run(names or [], max_children=1)


@contextmanager
def prefect_api(wanted: bool) -> Iterator[None]:
    """One Prefect server for every mutant's tests, its URL in LENSES_TEST_PREFECT_API_URL.

    Nothing of the project is imported here: a module loaded into mutmut's own process would be the
    unmutated one, and the fork server would hand it to every mutant."""
    if not wanted:
        yield
        return
    server = _load_by_path(REPO / "tests" / "support" / "prefect_server.py")
    with tempfile.TemporaryDirectory(prefix="mutation-prefect-") as home:
        env = server.prefect_env(Path(home))
        with server.prefect_server_process(Path(home), _free_port(), env) as (api_url, _):
            os.environ["LENSES_TEST_PREFECT_API_URL"] = api_url
            try:
                yield
            finally:
                os.environ.pop("LENSES_TEST_PREFECT_API_URL", None)


def _load_by_path(path: Path) -> ModuleType:
    """A helper file loaded under a private name, so no `tests` or `lenses_data` package is imported."""
    spec = importlib.util.spec_from_file_location(f"_mutation_{path.stem}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def last_survivors(module: str) -> list[str]:
    """The last run's mutants that were neither killed nor listed as equivalent."""
    listed = equivalent_mutants(module)
    return sorted(n for n, status in statuses(module).items() if status not in KILLED and n not in listed)


def dump_survivors(module: str, path: Path) -> None:
    """Every survivor's diff in one file, to read or to hand to whoever writes the killing test."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    with path.open("w") as out:
        for name in last_survivors(module):
            out.write(f"# {name}\n{get_diff_for_mutant(name, path=module)}\n\n")


def statuses(module: str) -> dict[str, str]:
    """Each mutant of `module` and what became of it, read back from mutmut's results."""
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.stats import status_by_exit_code

    data = SourceFileMutationData(path=Path(module))
    data.load()
    return {name: status_by_exit_code[code] for name, code in data.exit_code_by_key.items()}


def report(module: str, outcome: dict[str, str]) -> float:
    """Print the survivors and the score; returns the score in percent."""
    listed = equivalent_mutants(module)
    equivalent = listed & outcome.keys()
    for name in sorted(listed - outcome.keys()):  # mutmut numbers mutants per function: code moved
        print(f"  stale equivalent entry (no such mutant now; re-check the table): {name}")
    counted = {name: status for name, status in outcome.items() if name not in equivalent}
    killed = sum(status in KILLED for status in counted.values())
    for name, status in sorted(counted.items()):
        if status not in KILLED:
            print(f"  {status:10} {name}")
    score = 100.0 * killed / len(counted) if counted else 0.0
    print(
        f"\n{module}: {len(outcome)} mutants, {len(equivalent)} equivalent; {dict(Counter(outcome.values()))}"
    )
    print(f"score: {killed} of {len(counted)} non-equivalent mutants killed = {score:.1f}%")
    return score


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module", choices=sorted(TESTS), help="the module to mutate, as a path")
    parser.add_argument(
        "--keep", action="store_true", help="reuse mutants/ from the last run (mutmut's cache)"
    )
    parser.add_argument("--report-only", action="store_true", help="print the last run's result")
    parser.add_argument(
        "--survivors",
        action="store_true",
        help="rerun only the last run's survivors against today's tests (new tests included)",
    )
    parser.add_argument("--dump", type=Path, help="write each survivor's diff to this file")
    args = parser.parse_args(argv)
    if args.survivors:
        names = last_survivors(args.module)
        print(f"rerunning {len(names)} survivors of the last run")
        if names:
            run_mutmut(args.module, fresh=False, names=names)
    elif not args.report_only:
        run_mutmut(args.module, fresh=not args.keep)
    report(args.module, statuses(args.module))
    if args.dump:
        dump_survivors(args.module, args.dump)
    return 0


if __name__ == "__main__":
    sys.exit(main())
