"""The layout of training/: no import cycle between its modules or its sub-packages, small files.

The import graph is read from the source with `ast` (nothing is imported), counting imports inside
functions too: a cycle hidden in a function body is still a cycle (eval_inputs <-> evaluate was one).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 300


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the modules of the same top-level package it imports (any depth in the file)."""
    top = root.name
    modules = {module_name(root, p): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from pkg import name`: name may be a submodule of pkg or an attribute of it.
                targets = [f"{node.module}.{a.name}" for a in node.names]
                targets = [t if t in modules else node.module for t in targets]
            else:
                continue
            for target in targets:
                while target and target not in modules and target.startswith(top + "."):
                    target = target.rsplit(".", 1)[0]  # `import a.b.c` with c an attribute
                if target in modules and target != mod:
                    graph[mod].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None; iterative DFS with colours."""
    colour = dict.fromkeys(graph, 0)  # 0 unseen, 1 on the current path, 2 done
    for start in sorted(graph):
        if colour[start]:
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        colour[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                colour[path.pop()] = 2
                stack.pop()
            elif colour[nxt] == 1:
                return path[path.index(nxt) :] + [nxt]
            elif colour[nxt] == 0:
                colour[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def package_graph(graph: dict[str, set[str]], top: str) -> dict[str, set[str]]:
    """Edges between the sub-packages (training.X) the modules belong to; top-level modules are their own."""

    def pkg(mod: str) -> str:
        return ".".join(mod.split(".")[:2])

    out: dict[str, set[str]] = {}
    for mod, targets in graph.items():
        if mod == top:  # training/__init__.py re-exports a constant; it sits above everything
            continue
        out.setdefault(pkg(mod), set()).update(pkg(t) for t in targets if pkg(t) != pkg(mod) and t != top)
    for targets in list(out.values()):
        for t in targets:
            out.setdefault(t, set())
    return out


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


@pytest.mark.parametrize(
    "path", sorted((REPO_ROOT / "training").rglob("*.py")), ids=lambda p: str(p.relative_to(REPO_ROOT))
)
def test_training_files_stay_small(path):
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(REPO_ROOT)} has {n} lines (split it)"
