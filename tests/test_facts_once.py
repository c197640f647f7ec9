"""Each fact once (issue 34): the model roles, the stage list and the template of each text kind
are declared in one place, and the code derives the rest from it. The tests read the source and
fail where a declaration is written a second time; what cannot derive (a static file, a class's
fields) is checked against the declaration instead."""

from __future__ import annotations

from lenses_data.config.pipeline import BUILTIN_STAGES, FunnelStep, StageSpec
from lenses_data.config.roles import MODEL_ROLES, ROLE_OF_STAGE, ROLES
from lenses_data.stages.registry import STAGES
from tests.source_facts import keyword_constants, string_collections, string_constants

PIPELINE = ("lenses_data", "lenses_app", "flows")  # benchmarks may pick one role to measure

# The roles are declared with the stages that ask them (a model stage's `role` and `needs`).
ROLES_DECLARED = "lenses_data/config/pipeline.py"
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
    """A request's role is its stage's (`ROLE_OF_STAGE`), never a string written at the call; the
    declaration alone names the role of each model stage."""
    found = [str(w) for w in keyword_constants("role", PIPELINE) if w.path != ROLES_DECLARED]
    assert found == []


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


STAGES_DECLARED = "lenses_data/config/pipeline.py"


def test_the_stage_list_is_written_once():
    """No literal list names most of the stages: the declaration's specs are the list, and the
    order, choices, flows, commands, bands, funnel and counts derive from them."""
    lists = [w for w in string_collections() if len(set(w.values) & set(STAGES)) > len(STAGES) // 2]
    assert lists == [], [str(w) for w in lists]
    assert tuple(STAGES) == tuple(spec.name for spec in BUILTIN_STAGES)


def test_the_stages_as_fields_derive_from_the_declaration():
    """The facts once written per stage in five files (issue 40): each derives from the declaration."""
    from lenses_data.config.yields import YieldBands
    from lenses_data.plan.build import PER_ANSWER, STAGE_UNIT
    from lenses_data.publish.card_counts import declared_steps
    from lenses_data.stages.export_texts import FINAL_STAGE

    names = [spec.name for spec in BUILTIN_STAGES]
    assert [field.alias or name for name, field in YieldBands.model_fields.items()] == names
    assert STAGE_UNIT == {s.name: s.plan_unit for s in BUILTIN_STAGES if s.role}
    assert PER_ANSWER == {s.name for s in BUILTIN_STAGES if s.per_answer}
    assert [stage for stage, _ in declared_steps()] == [s.name for s in BUILTIN_STAGES for _ in s.funnel]
    assert FINAL_STAGE == BUILTIN_STAGES[-1].input
    assert all(isinstance(step, FunnelStep) for s in BUILTIN_STAGES for step in s.funnel)
    assert all(isinstance(s, StageSpec) and s.help for s in BUILTIN_STAGES)


def test_stage_names_are_written_only_in_the_declaration():
    """Product code names another stage's directory by the declaration's constants: no
    `stage_dir(run, "dedupe")`, `read_marker(run, "filter")` or `guarded_stage("split", ...)`."""
    import re

    from tests.source_facts import REPO_ROOT

    names = "|".join(STAGES)
    call = re.compile(rf"\((?:run|config\.run_dir|Path\(run\)), \"({names})\"")
    guarded = re.compile(rf"guarded_stage\(\"({names})\"")
    found = [
        f"{path.relative_to(REPO_ROOT)}:{n}"
        for package in PIPELINE
        for path in sorted((REPO_ROOT / package).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if call.search(line) or guarded.search(line) or re.match(r"^STAGE = \"", line)
    ]
    assert found == []


def test_prefect_yaml_deploys_every_stage_flow_in_order():
    """prefect.yaml is static: its per-stage deployments are those of declared stages, in the declared
    order, each at its stage's flow (a new stage may go without one: it runs in every build)."""
    import yaml

    from tests.source_facts import REPO_ROOT

    spec = yaml.safe_load((REPO_ROOT / "prefect.yaml").read_text())
    deployed = [
        (d["name"], d["entrypoint"])
        for d in spec["deployments"]
        if d["entrypoint"].startswith("flows/stages.py:")
    ]
    expected = [(f"{name.replace('_', '-')}-local", f"flows/stages.py:{name}_flow") for name in STAGES]
    assert deployed == [pair for pair in expected if pair in deployed] != []


def test_every_stage_has_its_flow_and_its_command():
    """The flows' module attributes are Prefect's entrypoints (named in prefect.yaml), written out."""
    from prefect import Flow

    import flows.stages
    from lenses_app.cli import build_parser

    stage_flows = {name: f.name for name, f in vars(flows.stages).items() if isinstance(f, Flow)}
    stage_flows.pop("stage_shards_flow")  # the shard-mapping subflow, no stage of its own
    assert stage_flows == {f"{name}_flow": name.replace("_", "-") for name in STAGES}
    commands = build_parser()._subparsers._group_actions[0].choices  # argparse keeps subcommands here
    assert {name.replace("_", "-") for name in STAGES} <= set(commands)


TEMPLATES_DECLARED = "lenses_data/annotation/prompts.py"


def test_the_template_of_each_text_kind_is_written_once():
    """One mapping kind -> template (either way round); the prompts' template named there only
    ("captions" also names an export table, so only the mapping is searched for it)."""
    from lenses_data.annotation.prompts import TEMPLATE_OF_KIND

    def pairs_kind_and_template(pair: tuple[str, str]) -> bool:
        return {*pair} & set(TEMPLATE_OF_KIND) != set() and {*pair} & set(TEMPLATE_OF_KIND.values()) != set()

    mappings = [w for w in string_collections() if any(map(pairs_kind_and_template, w.pairs))]
    assert [(w.path, w.pairs) for w in mappings] == [(TEMPLATES_DECLARED, tuple(TEMPLATE_OF_KIND.items()))]
    named = [w for w in string_constants() if w.values[0].endswith(TEMPLATE_OF_KIND["prompt"])]
    assert [(w.path, w.values) for w in named] == [(TEMPLATES_DECLARED, (TEMPLATE_OF_KIND["prompt"],))]
