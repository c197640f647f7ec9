"""Each fact once (issue 34): the model roles, the stage list and the template of each text kind
are declared in one place, and the code derives the rest from it. The tests read the source and
fail where a declaration is written a second time; what cannot derive (a static file, a class's
fields) is checked against the declaration instead."""

from __future__ import annotations

from lenses_data.config.roles import MODEL_ROLES, ROLE_OF_STAGE, ROLES
from lenses_data.stages.registry import STAGES
from tests.source_facts import keyword_constants, string_collections, string_constants

PIPELINE = ("lenses_data", "lenses_app", "flows")  # benchmarks may pick one role to measure

ROLES_DECLARED = "lenses_data/config/roles.py"
# Per-role values keyed by the role's name, not a list of the roles: ModelsConfig's sections and
# their defaults, and the plan's tiles-per-request assumption (read with a default of 0).
PER_ROLE_TABLES = {"lenses_data/config/models.py", "lenses_data/plan/schemas.py"}


def _names_a_role(value: str) -> bool:
    """A role's name where it cannot be a stage's (`filter` is both), or a path in its config section."""
    return value in set(ROLES) - set(STAGES) or any(f"models.{role}." in value for role in ROLES)


def test_role_names_are_written_only_where_the_roles_are_declared():
    found = [
        str(w)
        for w in string_constants(PIPELINE)
        if _names_a_role(w.values[0]) and w.path not in {ROLES_DECLARED, *PER_ROLE_TABLES}
    ]
    assert found == []


def test_no_list_of_the_roles_but_their_declaration():
    """Benchmarks included: a loop over the roles reads `ROLES`."""
    found = [
        str(w)
        for w in string_collections()
        if len(set(w.values) & set(ROLES)) >= 2 and w.path not in {ROLES_DECLARED, *PER_ROLE_TABLES}
    ]
    assert found == []


def test_no_request_or_stage_writes_its_role_by_hand():
    """A request's role is its stage's (`ROLE_OF_STAGE`), never a string written at the call."""
    assert [str(w) for w in keyword_constants("role", PIPELINE)] == []


def test_every_role_has_its_config_section_and_a_stage():
    from lenses_data.config.models import ModelsConfig, RoleConfig

    sections = [name for name, field in ModelsConfig.model_fields.items() if field.annotation is RoleConfig]
    assert sections == list(ROLES)
    assert set(ROLE_OF_STAGE) <= set(STAGES) and len(ROLE_OF_STAGE) == len(MODEL_ROLES)


def test_a_role_written_again_is_found(tmp_path, monkeypatch):
    """The scan sees a restated role list and a role passed by hand (the two ways it came back)."""
    import tests.source_facts as source

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text('NAMES = ("filter", "generator")\nask(role="filter")\n')
    monkeypatch.setattr(source, "REPO_ROOT", tmp_path)
    assert [str(w) for w in source.string_constants(("pkg",)) if _names_a_role(w.values[0])] == [
        "pkg/m.py:1: 'generator'"
    ]
    assert [str(w) for w in source.keyword_constants("role", ("pkg",))] == ["pkg/m.py:2: 'filter'"]
