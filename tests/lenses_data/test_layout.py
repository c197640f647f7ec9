"""The layout of lenses_data/ (docs/architecture.md, "Packages and their order of use"): its packages
in one order of use with every import pointing down it, no import cycle between modules or packages,
a few loose modules at the root, and nothing imported from the application layers above it
(flows, training, lenses_app), not even inside a function.
"""

from __future__ import annotations

from pathlib import Path

from tests.import_graph import find_cycle, import_graph, imports_of_packages, package_cycles, package_graph

REPO_ROOT = Path(__file__).resolve().parents[2]
ROOT = REPO_ROOT / "lenses_data"
MAX_LOOSE_ROOT_MODULES = 8

# Lowest first: a package may import only from packages before it. "root" is the loose modules of
# lenses_data/ (schemas, ids, io, resources, runlock): the foundation, with config/.
ORDER_OF_USE = (
    "root",
    "config",
    "models",
    "annotation",
    "candidates",
    "dedupe",
    "plan",
    "publish",
    "stages",
    "simulator",
)


def layer(package: str) -> str:
    """`lenses_data.stages` -> "stages"; a loose module (`lenses_data.io`) -> "root"."""
    name = package.split(".")[1]
    return name if (ROOT / name).is_dir() else "root"


def layer_graph() -> dict[str, set[str]]:
    layers: dict[str, set[str]] = {}
    for package, targets in package_graph(import_graph(ROOT), "lenses_data").items():
        src = layer(package)
        layers.setdefault(src, set()).update(layer(t) for t in targets if layer(t) != src)
    return layers


def upward_arrows(layers: dict[str, set[str]]) -> list[str]:
    rank = {name: i for i, name in enumerate(ORDER_OF_USE)}
    return sorted(f"{src} -> {dst}" for src, dsts in layers.items() for dst in dsts if rank[dst] > rank[src])


def test_every_package_has_its_place_in_the_order():
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    assert packages | {"root"} == set(ORDER_OF_USE)


def test_lenses_data_modules_have_no_import_cycle():
    graph = import_graph(ROOT)
    assert len(graph) > 80  # the whole package was read
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def test_lenses_data_packages_have_no_import_cycle():
    cycle = find_cycle(layer_graph())
    assert cycle is None, f"package cycle: {' -> '.join(cycle)}"


def test_no_import_cycle_between_packages_at_any_depth():
    """Every package's children (sub-packages and modules), at every nesting level, import one
    another without a cycle: lenses_data/ and the application layers above it."""
    for top in ("lenses_data", "lenses_app", "flows"):
        graph = import_graph(REPO_ROOT / top)
        assert package_cycles(graph) == {}, top


def test_no_import_points_up_the_order_of_use():
    layers = layer_graph()
    assert layers["stages"] >= {"models", "annotation", "candidates", "dedupe", "publish"}  # graph was read
    assert upward_arrows(layers) == []


def test_an_upward_arrow_is_reported():
    assert upward_arrows({"models": {"config", "simulator"}, "root": set()}) == ["models -> simulator"]


def test_few_loose_modules_at_the_root():
    loose = sorted(p.stem for p in ROOT.glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= MAX_LOOSE_ROOT_MODULES, loose


def test_lenses_data_imports_no_application_layer():
    found = imports_of_packages(ROOT, {"flows", "training", "lenses_app"})
    assert found == {}, found


def test_nothing_below_the_cli_imports_lenses_app():
    for below in ("lenses_data", "flows", "training"):
        found = imports_of_packages(REPO_ROOT / below, {"lenses_app"})
        assert found == {}, (below, found)
