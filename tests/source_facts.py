"""Read the project's source with `ast` (nothing imported) for the literals the facts tests look for:
string constants (docstrings left out) and literal collections of strings (tuples, lists, sets, the
keys and values of dicts), each with the file and line it is written at."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# The code that states the pipeline's facts: its packages, the flows, the CLI and the benchmarks
# (tests may restate what they expect; training/ reads the export, not the pipeline's tables).
SOURCE_DIRS = ("lenses_data", "lenses_app", "flows", "benchmarks")


@dataclass(frozen=True)
class Written:
    path: str  # relative to the repository root
    line: int
    values: tuple[str, ...]  # one string for a constant; the strings of a collection, in order
    pairs: tuple[tuple[str, str], ...] = ()  # a dict's string keys and values

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {', '.join(map(repr, self.values))}"


def source_files(dirs: tuple[str, ...] = SOURCE_DIRS) -> Iterator[tuple[str, ast.AST]]:
    for folder in dirs:
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            yield str(path.relative_to(REPO_ROOT)), ast.parse(path.read_text(), filename=str(path))


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _strings(nodes: list[ast.expr | None]) -> tuple[str, ...]:
    return tuple(n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str))


def string_constants(dirs: tuple[str, ...] = SOURCE_DIRS) -> Iterator[Written]:
    """Every string constant that is not a docstring (f-string pieces included)."""
    for path, tree in source_files(dirs):
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                yield Written(path, node.lineno, (node.value,))


def string_collections(dirs: tuple[str, ...] = SOURCE_DIRS) -> Iterator[Written]:
    """Every tuple, list or set literal with string elements, and every dict literal (its keys as
    `values`, its string key/value pairs as `pairs`); `Literal["a", "b"]` is a tuple here too."""
    for path, tree in source_files(dirs):
        for node in ast.walk(tree):
            if isinstance(node, ast.Tuple | ast.List | ast.Set):
                values = _strings(list(node.elts))
                if values:
                    yield Written(path, node.lineno, values)
            elif isinstance(node, ast.Dict):
                pairs = tuple(
                    (k.value, v.value)
                    for k, v in zip(node.keys, node.values, strict=True)
                    if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)
                    and isinstance(k.value, str) and isinstance(v.value, str)
                )  # fmt: skip
                yield Written(path, node.lineno, _strings(list(node.keys)), pairs)


def keyword_constants(name: str, dirs: tuple[str, ...] = SOURCE_DIRS) -> Iterator[Written]:
    """Calls that pass keyword `name` a string constant, e.g. `ModelRequest(role="filter")`."""
    for path, tree in source_files(dirs):
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == name and isinstance(node.value, ast.Constant):
                if isinstance(node.value.value, str):
                    yield Written(path, node.value.lineno, (node.value.value,))


def assigned_constants(word: str, dirs: tuple[str, ...] = SOURCE_DIRS) -> Iterator[Written]:
    """Names and attributes assigned a string or number constant whose name contains `word` (any
    case), e.g. `TEMPLATE = "filter"` or `template = "filter"` in a class body, `SHARE = 0.4`."""
    for path, tree in source_files(dirs):
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                targets, value = node.targets, node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            else:
                continue
            if not (isinstance(value, ast.Constant) and isinstance(value.value, str | int | float)):
                continue
            for target in targets:
                name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", "")
                if word.lower() in name.lower():
                    yield Written(path, node.lineno, (str(value.value),))


def number_constants(value: float, dirs: tuple[str, ...] = SOURCE_DIRS) -> Iterator[Written]:
    """Every numeric constant equal to `value` (ints and floats), e.g. each 0.4 written."""
    for path, tree in source_files(dirs):
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and type(node.value) in (int, float) and node.value == value:
                yield Written(path, node.lineno, (repr(node.value),))
