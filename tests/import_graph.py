"""The import graph of a package read from its source with `ast` (nothing is imported), counting
imports inside functions too: a cycle hidden in a function body is still a cycle. Used by the layout
tests of training/ and lenses_data/.
"""

from __future__ import annotations

import ast
from pathlib import Path


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


def children_graph(graph: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """Edges between the direct children (sub-packages and modules) of `package`, each child standing
    for every module below it: `pkg.a.x.m -> pkg.a.y.n` is `pkg.a.x -> pkg.a.y` in the graph of `pkg.a`."""
    depth = package.count(".") + 1

    def child(mod: str) -> str | None:
        return ".".join(mod.split(".")[: depth + 1]) if mod.startswith(package + ".") else None

    out: dict[str, set[str]] = {}
    for mod, targets in graph.items():
        src = child(mod)
        if src is None:
            continue
        out.setdefault(src, set())
        for t in targets:
            dst = child(t)
            if dst is not None and dst != src:
                out[src].add(dst)
                out.setdefault(dst, set())
    return out


def package_cycles(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """{package: a cycle between its direct children} for every package at every depth (a module of
    the graph that others sit below), not only one level under the top."""
    packages = {m.rsplit(".", 1)[0] for m in graph if "." in m}
    found = {}
    for package in sorted(packages):
        cycle = find_cycle(children_graph(graph, package))
        if cycle is not None:
            found[package] = cycle
    return found


def imports_of_packages(root: Path, tops: set[str]) -> dict[str, set[str]]:
    """module of `root` -> the modules it imports (any depth in the file) whose top-level package is
    one of `tops` (e.g. another package of the repository)."""
    found: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            hits = {n for n in names if n.split(".")[0] in tops}
            if hits:
                found.setdefault(module_name(root, path), set()).update(hits)
    return found


def longest_chain(graph: dict[str, set[str]]) -> list[str]:
    """The longest path [a, b, ..., z] of modules each importing the next (graph must have no cycle);
    its depth is len(path) - 1 imports. Memoised DFS over the sorted graph, so the answer is stable."""
    best: dict[str, list[str]] = {}

    def from_(mod: str) -> list[str]:
        if mod not in best:
            tails = [from_(t) for t in sorted(graph[mod])]
            best[mod] = [mod, *max(tails, key=len, default=[])]
        return best[mod]

    return max((from_(m) for m in sorted(graph)), key=len, default=[])
