"""Every module is named in the architecture docs, so a newcomer finds each file described somewhere.

A module counts as named when `docs/architecture.md` or a page of `docs/components/` mentions its
file path (`lenses_data/models/calls.py`) or its dotted path (`lenses_data.models.calls`); a package
whose `__init__.py` holds code may also be named by its folder (`lenses_data/plan/`). A short name
(`calls.py`) does not count: two packages may hold a module of that name.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("lenses_data", "lenses_app", "flows", "training")


def holds_code(init_file: Path) -> bool:
    """True when a package's `__init__.py` has any statement besides its docstring."""
    body = ast.parse(init_file.read_text(encoding="utf-8")).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return bool(body)


def documented_modules(root: Path = REPO_ROOT) -> list[Path]:
    """The modules the docs must name, as paths relative to `root`."""
    modules = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root)
            if path.name == "__init__.py" and not holds_code(path):
                continue
            modules.append(relative)
    return modules


def names_of(module: Path) -> list[str]:
    """The spellings that count as naming `module`: file path, dotted path, package folder."""
    parts = list(module.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
        return [module.as_posix(), ".".join(parts), "/".join(parts) + "/"]
    return [module.as_posix(), ".".join(parts)]


def is_named(module: Path, text: str) -> bool:
    # Not part of a longer path (tests/lenses_data/..., lenses_data.models.calls_x), but a module
    # path may be followed by an attribute (`lenses_data.models.probe.check_roles`).
    for name in names_of(module):
        if re.search(rf"(?<![\w./]){re.escape(name)}(?!\w)", text):
            return True
    return False


def docs_text(root: Path = REPO_ROOT) -> str:
    pages = [root / "docs" / "architecture.md", *sorted((root / "docs" / "components").glob("*.md"))]
    return "\n".join(page.read_text(encoding="utf-8") for page in pages)


def test_modules_are_found():
    """The walk sees the packages (an empty list would pass the real test vacuously)."""
    modules = {m.as_posix() for m in documented_modules()}
    assert "lenses_data/models/client.py" in modules
    assert "lenses_data/plan/__init__.py" in modules  # a package whose __init__ holds code
    assert "training/configs/__init__.py" not in modules  # a docstring only
    assert "training/evaluation/metrics/ranking.py" in modules  # sub-packages are walked too


def test_is_named_needs_the_whole_path():
    module = Path("lenses_data/models/calls.py")
    assert is_named(module, "see `lenses_data/models/calls.py`")
    assert is_named(module, "`lenses_data.models.calls.call_one` does it")
    assert not is_named(module, "`calls.py` in the client")
    assert not is_named(module, "`tests/lenses_data/models/calls.py`")
    assert not is_named(module, "`lenses_data.models.calls_extra`")


def test_every_module_is_named_in_the_docs():
    text = docs_text()
    missing = [m.as_posix() for m in documented_modules() if not is_named(m, text)]
    assert not missing, (
        f"{len(missing)} module(s) named nowhere in docs/architecture.md or docs/components/*.md "
        "(write one line each, with the file or dotted path): " + ", ".join(missing)
    )
