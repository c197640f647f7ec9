"""The layout of training/: no import cycle between its modules or its sub-packages, small files.

The import graph is read from the source with `ast` (nothing is imported), counting imports inside
functions too: a cycle hidden in a function body is still a cycle (eval_inputs <-> evaluate was one).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.import_graph import find_cycle, import_graph, longest_chain, package_cycles, package_graph

REPO_ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 300
# The longest chain of training/ modules importing one another, in imports (run -> ... -> lenses is
# 9 today; it was 14 before training/evaluation was grouped, tables no longer import the runs).
MAX_IMPORT_DEPTH = 9


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root / "pkg"


def test_cycle_finder_sees_a_cycle_hidden_in_a_function(tmp_path):
    root = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a/__init__.py": "",
            "pkg/a/run.py": "from pkg.a.types import X\ndef f():\n    from pkg.b import inputs\n",
            "pkg/a/types.py": "X = 1\n",
            "pkg/b/__init__.py": "",
            "pkg/b/inputs.py": "import numpy\nfrom pkg.a.run import f\n",
        },
    )
    graph = import_graph(root)
    assert graph["pkg.a.run"] == {"pkg.a.types", "pkg.b.inputs"}
    cycle = find_cycle(graph)
    assert cycle is not None and set(cycle) == {"pkg.a.run", "pkg.b.inputs"}
    # Moving the shared record to its own module breaks the module cycle...
    (root / "b" / "inputs.py").write_text("from pkg.a.types import X\n")
    assert find_cycle(import_graph(root)) is None
    # ...but a -> b -> a between sub-packages is still reported at package level.
    assert find_cycle(package_graph(import_graph(root), "pkg")) == ["pkg.a", "pkg.b", "pkg.a"]


def test_attribute_imports_resolve_to_their_module(tmp_path):
    root = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/m.py": "import pkg.n.CONST\nfrom pkg import n\n",
            "pkg/n.py": "CONST = 1\n",
        },
    )
    assert import_graph(root)["pkg.m"] == {"pkg.n"}


def test_training_modules_have_no_import_cycle():
    graph = import_graph(REPO_ROOT / "training")
    assert len(graph) > 25  # the whole package was read
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def test_training_subpackages_have_no_import_cycle():
    packages = package_graph(import_graph(REPO_ROOT / "training"), "training")
    assert {"training.retriever", "training.loop", "training.evaluation"} <= set(packages)
    cycle = find_cycle(packages)
    assert cycle is None, f"sub-package cycle: {' -> '.join(cycle)}"
    assert packages["training.retriever"] == set()  # the model imports nothing else from training/


def test_a_cycle_between_packages_two_levels_down_is_reported(tmp_path):
    """pkg.ev.metrics <-> pkg.ev.scoring: no module cycle, no cycle one level below pkg (both sit
    in pkg.ev), but a cycle between the sub-packages of pkg.ev, which package_cycles reports."""
    root = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/ev/__init__.py": "",
            "pkg/ev/metrics/__init__.py": "",
            "pkg/ev/metrics/lens.py": "from pkg.ev.scoring.sim import f\n",
            "pkg/ev/metrics/retrieval.py": "N = 5\n",
            "pkg/ev/scoring/__init__.py": "",
            "pkg/ev/scoring/sim.py": "from pkg.ev.metrics.retrieval import N\ndef f(): pass\n",
        },
    )
    graph = import_graph(root)
    assert find_cycle(graph) is None and find_cycle(package_graph(graph, "pkg")) is None
    assert package_cycles(graph) == {"pkg.ev": ["pkg.ev.metrics", "pkg.ev.scoring", "pkg.ev.metrics"]}
    (root / "ev" / "scoring" / "sim.py").write_text("N = 5\ndef f(): pass\n")
    assert package_cycles(import_graph(root)) == {}


def test_training_packages_have_no_import_cycle_at_any_depth():
    """Between the children of every package at every nesting level (training/evaluation's
    metrics/scoring and tables/imp/external were such cycles, invisible one level below training/)."""
    graph = import_graph(REPO_ROOT / "training")
    assert "training.evaluation.metrics" in graph  # the nested packages were read
    assert package_cycles(graph) == {}


def test_longest_chain_counts_imports_along_the_deepest_path():
    graph = {"a": {"b", "c"}, "b": {"d"}, "c": set(), "d": {"e"}, "e": set(), "f": {"a"}}
    assert longest_chain(graph) == ["f", "a", "b", "d", "e"]
    graph["e"] = {"c"}  # one more link at the bottom lengthens the chain
    assert len(longest_chain(graph)) - 1 == 5
    assert longest_chain({}) == []


def test_training_import_chains_stay_shallow():
    """A newcomer following the imports from any training/ module reaches the bottom within
    MAX_IMPORT_DEPTH hops. Imports inside functions count as much as those at the top of a file
    (import_graph reads both): a deferred import still has to be read to follow the code, and it
    is how the old 14-deep chain through training/evaluation hid (run -> reports -> paper_tables ->
    harnesses -> generator_swap -> backbone_scaling -> swap_runs -> paper_runs -> inputs -> ...)."""
    chain = longest_chain(import_graph(REPO_ROOT / "training"))
    depth = len(chain) - 1
    assert depth <= MAX_IMPORT_DEPTH, f"import chain {depth} deep: {' -> '.join(chain)}"


def test_evaluation_tables_reach_no_run():
    """The markdown of training/evaluation/tables reads the results dict only: nothing it imports,
    directly or through other modules, is a run (systems/, run.py). A table that imported its run
    is what made the old chain 14 deep."""
    graph = import_graph(REPO_ROOT / "training")
    tables = [m for m in graph if m.startswith("training.evaluation.tables.")]
    assert "training.evaluation.tables.paper_tables" in tables
    seen, todo = set(), list(tables)
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    runs = sorted(
        m for m in seen if m.startswith("training.evaluation.systems") or m == "training.evaluation.run"
    )
    assert runs == [], f"tables/ reach {runs}"


@pytest.mark.parametrize(
    "path", sorted((REPO_ROOT / "training").rglob("*.py")), ids=lambda p: str(p.relative_to(REPO_ROOT))
)
def test_training_files_stay_small(path):
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(REPO_ROOT)} has {n} lines (split it)"


def test_the_retrievers_config_imports_no_pipeline_config():
    """`training.retriever.config` merges its YAML with `lenses_data.merge` (imports nothing) and reads
    the lens inventory from `lenses_data.schemas`: importing it loads no part of `lenses_data.config`
    (yields, simulator settings, model roles), which it pulled in while deep_merge came through there.
    A fresh interpreter, so modules other tests loaded do not count."""
    import json
    import subprocess
    import sys

    code = (
        "import sys, json; import training.retriever.config; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('lenses_data', 'training'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    loaded = json.loads(out.stdout)
    assert loaded == [
        "lenses_data",
        "lenses_data.merge",
        "lenses_data.schemas",
        "training",
        "training.retriever",
        "training.retriever.config",
        "training.retriever.lenses",
    ]
