"""The pipeline, declared once: every built-in stage in run order, with what the rest derives from.

Each `StageSpec` names a stage, its class (imported only when the stage is built), the stage whose
shards it reads, the model role it asks and what that role needs of a server (a model stage; the
roles derive from these: `lenses_data.config.roles`), its default yield band, its rows of the
dataset card's funnel, its one-line help and its default retries. From this tuple derive: the
registry and the run order (`lenses_data.stages.registry`), one Prefect flow per stage
(`flows/stages.py`) and the build's order (`flows/build.py`), the stage commands' names and help
(`lenses_app/commands/annotate.py`), the check of prefect.yaml's stage deployments
(tests/test_facts_once.py), the fields of `yields.bands` (`lenses_data.config.yields`), which stages
`lenses plan` prices (`lenses_data.plan`), the card's funnel (`lenses_data.publish.card_counts`) and
the stage list of docs/architecture.md (checked by tests/lenses_data/test_pipeline_declaration.py).

A user's own stages (`pipeline.extra_stages` in the run's config, `lenses_data.config.extra_stages`)
are placed into this order by `run_specs`: a stage placed after X reads X's rows, and the stage that
read X reads the new one's instead.

Where the yield bands come from (001 = main paper, in shared/seeds):
- filter: 001 Sec. 3.1 and Table 1, about 10% of the candidates pass (`FILTER_PASS_SHARE`). Out of band
  when fewer than a fifth of that pass: a constraint or parser that turns answers into NO.
- rules, validate, visual_validate: 001 says failing texts "are either revised or discarded" and
  gives no rate; the project's assumptions are a few percent (`SimContentSettings`: 3% text, 1%
  visual discards; the rules kept 97% of the simulator's texts, docs/benchmarks.md). A quarter of
  the texts is several times that: a model that garbles the fixed Focus field, or a validator
  prompt it misreads, ends far above it.
- ingest, dedupe: no band (their share is the source's: broken files, duplicate-heavy crawls);
  generate: none either (its input is images, its output texts: the shares do not compare).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from lenses_data.config.paper import FILTER_PASS_SHARE

# The built-in stages' names: the constants product code reads another stage's directory by.
INGEST = "ingest"
DEDUPE = "dedupe"
FILTER = "filter"
SPLIT = "split"
GENERATE = "generate"
RULES = "rules"
VALIDATE = "validate"
VISUAL_VALIDATE = "visual_validate"
EXPORT = "export"

# A fifth of the paper's filter pass share (10%): the largest share a filter may reject.
FILTER_MAX_REJECTED = round(1 - FILTER_PASS_SHARE / 5, 3)
TEXT_MAX_REJECTED = 0.25


@dataclass(frozen=True)
class FunnelStep:
    """One row of the card's funnel: `count` is "rows" (every row of the stage), "texts" (images,
    prompts and captions of a text stage) or a boolean column whose true rows are counted."""

    label: str
    count: str = "rows"


@dataclass(frozen=True)
class StageSpec:
    """One stage of the pipeline. `input` is the stage whose shards it reads (None: the sources)."""

    name: str
    cls: str  # "module:Class"
    input: str | None
    help: str  # one line: the command's help, the flow's description, the docs' stage list
    role: str | None = None  # the model role it asks (`models.<role>`); None: a CPU stage
    needs: tuple[str, ...] = ()  # what the role's requests ask of a server (the probe checks each)
    max_rejected: float | None = None  # the default yield band (`yields.bands.<name>`)
    min_rejected: float | None = None
    funnel: tuple[FunnelStep, ...] = ()  # its rows of the card's funnel
    plan_unit: str | None = None  # model stages: the funnel count (`plan.Funnel`) its volume follows
    per_answer: bool = False  # model stages: its volume grows with the answers per image too
    retries: int | None = None  # its shard tasks' retries; None: `orchestration.task_retries`
    own_command: bool = False  # True: `lenses_app.commands.<name>` registers its command (own flags)
    settings: dict[str, Any] = field(default_factory=dict, compare=False)  # a user stage's own settings
    user: bool = False  # declared in the run's config (`pipeline.extra_stages`), not here


BUILTIN_STAGES: tuple[StageSpec, ...] = (
    StageSpec(
        INGEST,
        "lenses_data.stages.ingest:IngestStage",
        None,
        "read image folders, CC3M-style TSV/CSV, img2dataset Parquet, WebDataset .tar or WikiArt roots "
        "into RUN/ingest (accepted images) and RUN/rejections (everything refused, with a reason)",
        funnel=(FunnelStep("decoded candidate images"),),
        own_command=True,
    ),
    StageSpec(
        DEDUPE,
        "lenses_data.stages.dedupe:DedupeStage",
        INGEST,
        "group near-duplicates of RUN/ingest by perceptual hash (and CLIP embeddings when a local "
        "checkpoint is configured), keep one survivor per group, write RUN/dedupe and rejections",
        funnel=(FunnelStep("one per near-duplicate group", "kept"),),
        own_command=True,
    ),
    StageSpec(
        FILTER,
        "lenses_data.stages.filter:FilterStage",
        INGEST,
        "Listing 1: ask the VLM whether each deduplicated image supports clearly different "
        "non-literal readings (YES/NO); writes RUN/filter and reports the pass rate",
        role="filter",
        needs=("choice", "image"),  # Listing 1: YES/NO on an image
        max_rejected=FILTER_MAX_REJECTED,
        funnel=(FunnelStep("decided (Listing 1)"), FunnelStep("passed (YES)", "passed")),
        plan_unit="filter_images",
    ),
    StageSpec(
        SPLIT,
        "lenses_data.stages.split:SplitStage",
        DEDUPE,
        "assign dedupe survivors (filter-passed ones when RUN/filter is complete) to train/valid/test "
        "deterministically, whole groups at a time, and report cross-split pairs (always 0)",
        funnel=(FunnelStep("assigned"),),
        own_command=True,
    ),
    StageSpec(
        GENERATE,
        "lenses_data.stages.generate:GenerateStage",
        FILTER,
        "Listings 2-3: generate image-side prompts and captions (Prompt/Caption, Focus, "
        "Category) for every image that passed the filter and has a split; writes RUN/generate",
        role="generator",
        needs=("json", "image"),  # Listings 2-3
        funnel=(FunnelStep("generated", "texts"),),
        plan_unit="selected_images",
        per_answer=True,
    ),
    StageSpec(
        RULES,
        "lenses_data.stages.rules:RulesStage",
        GENERATE,
        "deterministic rule checks (word counts, self-containedness, artifacts, Category, Focus, "
        "phrase-bank idioms per lens, near-duplicates); writes RUN/rules",
        max_rejected=TEXT_MAX_REJECTED,
        funnel=(FunnelStep("rule checks passed", "texts"),),
    ),
    StageSpec(
        VALIDATE,
        "lenses_data.stages.validate:ValidateStage",
        RULES,
        "Listing 4: text-only validation and light editing of every text (edit, keep or "
        "discard; Focus and Category fixed); writes RUN/validate",
        role="validator",
        needs=("json",),  # Listing 4, text only
        max_rejected=TEXT_MAX_REJECTED,
        funnel=(FunnelStep("text-validated", "texts"),),
        plan_unit="selected_images",
        per_answer=True,
    ),
    StageSpec(
        VISUAL_VALIDATE,
        "lenses_data.stages.visual_validate:VisualValidateStage",
        VALIDATE,
        "Listing 5: image-grounded validation of test-split texts; other splits pass through; "
        "writes RUN/visual_validate",
        role="visual_validator",
        needs=("json", "image"),  # Listing 5
        max_rejected=TEXT_MAX_REJECTED,
        funnel=(FunnelStep("after visual validation (test)", "texts"),),
        plan_unit="test_images",
        per_answer=True,
    ),
    StageSpec(
        EXPORT,
        "lenses_data.stages.export:ExportStage",
        VISUAL_VALIDATE,
        "write the final dataset: images/captions/prompts/rejections.parquet, manifest.json and a "
        "dataset card README.md with figures",
        own_command=True,
    ),
)


def builtin() -> dict[str, StageSpec]:
    """The declared stages by name (read at each call: a test may declare one more)."""
    return {spec.name: spec for spec in BUILTIN_STAGES}


def builtin_order(dedupe_before_filter: bool = True) -> list[str]:
    """The built-in stages in run order; the paper's order (filter before dedupe) when asked."""
    order = [spec.name for spec in BUILTIN_STAGES]
    if not dedupe_before_filter:  # the paper's order: the filter sees every candidate
        first, second = order.index(DEDUPE), order.index(FILTER)
        order[first], order[second] = order[second], order[first]
    return order


def place_extra_stages(order: list[StageSpec], extras: Iterable[StageSpec]) -> list[StageSpec]:
    """The run's stages in order: each extra stage after its `input` (its `after`; after the extra
    stages placed there before it), reading that stage's rows; the stage that read them reads the
    extra stage's instead."""
    placed = list(order)
    for extra in extras:
        source = extra.input
        while (chained := [s for s in placed if s.user and s.input == source]) != []:
            source = chained[0].name  # a second stage after the same one goes after the first
        position = [spec.name for spec in placed].index(source)
        placed = [replace(spec, input=extra.name) if spec.input == source else spec for spec in placed]
        placed.insert(position + 1, replace(extra, input=source))
    return placed


def run_specs(config: Any) -> list[StageSpec]:
    """The stages of a run of `config` (a `PipelineConfig`), in order, each with the input it reads."""
    specs = builtin()
    order = [specs[name] for name in builtin_order(config.dedupe_before_filter)]
    return place_extra_stages(order, [stage.spec() for stage in config.pipeline.extra_stages])


def spec_of(name: str, config: Any | None = None) -> StageSpec:
    """A stage's spec in the run of `config` (its input as placed), or the built-in declaration."""
    if config is not None:
        for spec in run_specs(config):
            if spec.name == name:
                return spec
    if name in builtin():
        return builtin()[name]
    known = [spec.name for spec in (run_specs(config) if config is not None else BUILTIN_STAGES)]
    raise KeyError(f"unknown stage {name!r}; known: {', '.join(known)}")
