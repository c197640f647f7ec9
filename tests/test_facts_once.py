"""Each fact once (issue 34): the model roles, the stage list and the template of each text kind
are declared in one place, and the code derives the rest from it. The tests read the source and
fail where a declaration is written a second time; what cannot derive (a static file, a class's
fields) is checked against the declaration instead."""

from __future__ import annotations

import pytest

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


# Template names that also name something else ("filter": a stage and a role; "captions": an export
# table), so a bare string is no evidence: for them only a constant named for a template counts.
TEMPLATE_NAMES_SHARED = {"filter", "captions"}


def test_every_template_name_is_written_once():
    """The five templates are named in prompts.py only (rules, the simulator and the stages import
    the names): no string of a template's own name elsewhere, no `TEMPLATE = "..."` elsewhere."""
    from lenses_data.annotation.prompts import TEMPLATE_NAMES
    from tests.source_facts import assigned_constants

    own = set(TEMPLATE_NAMES) - TEMPLATE_NAMES_SHARED
    written = [str(w) for w in string_constants() if w.values[0] in own and w.path != TEMPLATES_DECLARED]
    assert written == []
    named = [
        str(w)
        for w in assigned_constants("template")
        if w.values[0] in TEMPLATE_NAMES and w.path != TEMPLATES_DECLARED
    ]
    assert named == []
    declared = [
        w.values[0]
        for w in string_constants((TEMPLATES_DECLARED.split("/")[0],))
        if w.path == TEMPLATES_DECLARED
    ]
    assert set(TEMPLATE_NAMES) <= set(declared)


LISTINGS_DECLARED = "lenses_data/config/annotate.py"


def _numbers_together(values: set[int]) -> list[str]:
    """Tuples, lists and calls of the pipeline whose numeric constants include all of `values`."""
    import ast

    from tests.source_facts import source_files

    found = []
    for path, tree in source_files(PIPELINE):
        for node in ast.walk(tree):
            if isinstance(node, ast.Tuple | ast.List):
                parts = node.elts
            elif isinstance(node, ast.Call):
                parts = [*node.args, *(k.value for k in node.keywords)]
            else:
                continue
            numbers = {p.value for p in parts if isinstance(p, ast.Constant) and type(p.value) is int}
            if values <= numbers:
                found.append(f"{path}:{node.lineno}")
    return found


def test_the_listings_word_ranges_are_written_once():
    """10-28 (prompts) and 8-22 (captions) in `LISTING_WORDS` only; the config's defaults, the
    simulator and the sample requests read it."""
    from lenses_data.config.annotate import LISTING_WORDS, AnnotateConfig

    for kind, (low, high) in LISTING_WORDS.items():
        assert [p.split(":")[0] for p in _numbers_together({low, high})] == [LISTINGS_DECLARED], kind
        assert AnnotateConfig().words(kind).model_dump() == {"min": low, "max": high}


def test_the_idiom_share_is_written_once():
    """0.4 (Listing 2's "about 40 percent") in `IDIOM_TARGET_SHARE` only: the config's default and
    the card's fallback for a manifest without it read it."""
    from lenses_data.config.annotate import IDIOM_TARGET_SHARE
    from tests.source_facts import number_constants

    assert [w.path for w in number_constants(IDIOM_TARGET_SHARE, PIPELINE)] == [LISTINGS_DECLARED]


def test_the_idiom_lenses_are_written_once():
    """Which lenses MUST carry an idiom and which must not: `IDIOM_REQUIRED_LENSES` /
    `IDIOM_FORBIDDEN_LENSES`, the config's defaults and the rules' defaults (no list of them elsewhere)."""
    from lenses_data.annotation.rules import text_violations
    from lenses_data.config.annotate import IDIOM_FORBIDDEN_LENSES, IDIOM_REQUIRED_LENSES, AnnotateConfig

    lists = [set(IDIOM_REQUIRED_LENSES), set(IDIOM_FORBIDDEN_LENSES)]
    assert [str(w) for w in string_collections() if set(w.values) in lists] == []
    config = AnnotateConfig()
    assert (config.idiom_required_lenses, config.idiom_forbidden_lenses) == (
        IDIOM_REQUIRED_LENSES,
        IDIOM_FORBIDDEN_LENSES,
    )
    defaults = text_violations.__kwdefaults__
    assert (defaults["required"], defaults["forbidden"]) == (IDIOM_REQUIRED_LENSES, IDIOM_FORBIDDEN_LENSES)


def test_the_listings_text_states_the_declared_facts():
    """prompts/*.txt are the paper's listings verbatim (hashed into the journal keys), so they cannot
    read the constants: they are checked against them instead."""
    from lenses_data.annotation.prompts import TEMPLATE_OF_KIND
    from lenses_data.config.annotate import IDIOM_TARGET_SHARE, LISTING_WORDS
    from tests.source_facts import REPO_ROOT

    for kind, (low, high) in LISTING_WORDS.items():
        text = (REPO_ROOT / "prompts" / f"{TEMPLATE_OF_KIND[kind]}.txt").read_text()
        assert f"{low}-{high} words" in text, kind
        assert f"{round(IDIOM_TARGET_SHARE * 100)} percent" in text, kind


PAPER_DECLARED = "lenses_data/config/paper.py"


def test_table_1_counts_are_written_once():
    """Every count of the paper's Table 1 (images, captions, captions per lens, by split) is written
    in config/paper.py only; the split's production sizes and the simulator derive from it."""
    from lenses_data.config.dedupe import PRODUCTION_SPLIT, TABLE1_IMAGES
    from lenses_data.config.paper import TABLE1
    from tests.source_facts import number_constants

    counts = {count for row in TABLE1.values() for count in row.values()}
    written = {
        str(w) for count in counts for w in number_constants(count, PIPELINE) if w.path != PAPER_DECLARED
    }
    assert written == set()
    assert PRODUCTION_SPLIT.sizes(TABLE1_IMAGES) == (TABLE1["valid"]["images"], TABLE1["test"]["images"])


def test_the_filters_pass_share_is_the_papers_and_written_once():
    """001 Sec. 3.1 states "approximately 10% of candidates pass" and 105,669 images; the candidate
    count is derived from the two (no paper states it). The yield band, the plan's paper funnel and the
    filter's `paper_pass_rate` read `FILTER_PASS_SHARE`; 10.6% (105,669 of an assumed 1,000,000) is gone."""
    from lenses_data.config.paper import FILTER_PASS_SHARE, PAPER
    from lenses_data.config.yields import FILTER_MAX_REJECTED
    from tests.source_facts import number_constants

    assert FILTER_PASS_SHARE == 0.10 and PAPER["images"] / PAPER["candidates"] == pytest.approx(
        FILTER_PASS_SHARE
    )
    assert FILTER_MAX_REJECTED == round(1 - FILTER_PASS_SHARE / 5, 3)
    readers = ("lenses_data/stages", "lenses_data/config", "lenses_data/plan", "lenses_data/publish")
    written = [w.path for w in number_constants(FILTER_PASS_SHARE, readers) if w.path != PAPER_DECLARED]
    assert written == ["lenses_data/config/simulator.py"]  # its text_edit_rate, an assumption of its own


MODELS_DECLARED = "lenses_data/config/models.py"


def test_model_ids_are_written_once():
    """The served models' ids (InternVL3.5-38B in both formats, Qwen2.5-32B-Instruct) are constants of
    config/models.py; the roles' defaults and the simulator's model list read them."""
    from lenses_data.config.models import INTERNVL, INTERNVL_HF, QWEN
    from lenses_data.simulator.simulator import SimConfig

    ids = {INTERNVL, INTERNVL_HF, QWEN}
    assert [str(w) for w in string_constants() if w.values[0] in ids and w.path != MODELS_DECLARED] == []
    assert tuple(SimConfig().models) == (INTERNVL, QWEN)


METRIC_KEYS_DECLARED = "training/evaluation/metrics/keys.py"


def test_metric_keys_are_written_once():
    """ "LC@10", "RSUM", "mAP@R", ...: named in training/evaluation/metrics/keys.py only; the metrics
    that compute them, the runs, the tables and the summary line import the names."""
    from tests.source_facts import string_constants as constants
    from training.evaluation.metrics import keys

    names = {v for k, v in vars(keys).items() if k.isupper() and isinstance(v, str)}
    assert {"LC@10", "All@10", "RSUM", "mAP@R"} <= names
    written = [
        str(w) for w in constants(("training",)) if w.values[0] in names and w.path != METRIC_KEYS_DECLARED
    ]
    assert written == []
