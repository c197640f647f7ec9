"""No stage imports another stage: the logic two stages share lives below them (`annotation/`,
`dedupe/`, `models/`), so a stage module can be read, changed and tested on its own."""

from __future__ import annotations

from pathlib import Path

from lenses_data.stages.registry import STAGES
from tests.import_graph import import_graph

ROOT = Path(__file__).resolve().parents[3] / "lenses_data"
STAGE_MODULES = {target.partition(":")[0] for target in STAGES.values()}


def stages_reached(graph: dict[str, set[str]], stage: str) -> set[str]:
    """The other stage modules `stage` imports, directly or through helpers in lenses_data.stages."""
    seen, todo = set(), [stage]
    while todo:
        for target in graph[todo.pop()]:
            if target.startswith("lenses_data.stages.") and target not in seen:
                seen.add(target)
                if target not in STAGE_MODULES:
                    todo.append(target)
    return (seen & STAGE_MODULES) - {stage}


def test_no_stage_imports_another_stage():
    graph = import_graph(ROOT)
    assert STAGE_MODULES <= set(graph)  # every stage module was read
    imports = {stage: sorted(stages_reached(graph, stage)) for stage in sorted(STAGE_MODULES)}
    assert {stage: found for stage, found in imports.items() if found} == {}


def test_a_stage_import_through_a_helper_is_found():
    graph = {
        "lenses_data.stages.validate": {"lenses_data.stages._helper"},
        "lenses_data.stages._helper": {"lenses_data.stages.rules", "lenses_data.annotation.rules"},
    }
    assert stages_reached(graph, "lenses_data.stages.validate") == {"lenses_data.stages.rules"}
