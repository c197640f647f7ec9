"""Settings guard: a rerun on a run directory must use the settings its finished shards were made with.

Each stage declares `output_settings`: the config paths (and `prompt:<template>` hashes) that
decide its output. When a stage starts, the values and their digest go to `RUN/<stage>/_SETTINGS.json`
(written before its first shard, so a half-finished stage is covered too). A stage's digest also
holds the digest of the stage before it, so a stage whose input changed differs as well.

Before a build does any work, `assess_run` compares every stage already on disk with the current
settings: the same; made from the first k of today's sources (sources appended: the stage is
extended with the new images, `APPENDABLE`); or other settings. `check_run_settings` stops at the
first stage with other settings (a `SettingsChanged`, a config error: exit code 2 from `lenses run`
and every stage command); with `--rebuild-changed` the entry moves that stage and every later one
aside instead (lenses_data.stages.rebuild) and redoes them. A stage run on its own
(`check_stage_settings`) is compared with its own outputs and the next stage's; the stages before it
are only read. Run directories written before this guard (no file) are accepted with one warning.
Callers go through `lenses_data.stages.entry`, which holds the run lock around the check.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_core import to_jsonable_python

from lenses_data import io
from lenses_data.config import ConfigError, PipelineConfig
from lenses_data.stages.protocol import declared_output_settings

log = logging.getLogger(__name__)

SETTINGS_FILE = "_SETTINGS.json"
PROMPT = "prompt:"
# Fields of a declared section that change speed or placement only, never rows.
RUNTIME_ONLY = frozenset(
    {
        "dedupe.hash_workers",
        "dedupe.clip_device",
        "dedupe.clip_batch_size",
        "dedupe.clip_precision",  # like the device: rounding only (bf16 within cosine 0.999 of fp32)
        "dedupe.clip_decode_workers",
    }
)


# The one setting that may grow without redoing a stage: sources appended at the end of the list add
# candidates (ingest appends shards; dedupe and split keep every earlier decision).
APPENDABLE = "ingest.sources"


class SettingsChanged(ConfigError):
    """A stage on disk was produced with other settings than this run's."""


def _value(config: PipelineConfig, path: str) -> Any:
    if path.startswith(PROMPT):
        from lenses_data.annotation.prompts import get_template

        return get_template(path[len(PROMPT) :]).hash
    node: Any = config
    for part in path.split("."):
        node = getattr(node, part)
    if hasattr(node, "model_dump"):
        return node.model_dump(mode="json")
    return to_jsonable_python(node)  # a frozen config's tuples are lists here, as in _SETTINGS.json


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}", item, out)
    elif prefix not in RUNTIME_ONLY:
        out[prefix] = value


def _in_run(value: Any, prefixes: tuple[str, ...]) -> Any:
    """Paths inside the run directory as `RUN/...`: a moved or copied run directory is the same run."""
    if isinstance(value, list):
        return [_in_run(item, prefixes) for item in value]
    if isinstance(value, str):
        for prefix in prefixes:
            if value == prefix or value.startswith(prefix + "/"):
                return "RUN" + value[len(prefix) :]
    return value


def _prefixes(run: Path) -> tuple[str, ...]:
    return tuple(dict.fromkeys([str(run.resolve()), str(run.absolute()), str(run)]))


def in_run_form(value: Any, run: str | Path) -> Any:
    """`value` with paths inside `run` written `RUN/...`, as the settings records hold them."""
    return _in_run(value, _prefixes(Path(run)))


def stage_inputs(name: str, config: PipelineConfig) -> dict[str, Any]:
    """The readable settings that decide stage `name`'s output, one dotted key per value."""
    from lenses_data.config.pipeline import spec_of
    from lenses_data.stages.registry import stage_class

    prefixes = _prefixes(Path(config.run_dir))
    out: dict[str, Any] = {}
    # Required of every stage: one without it is refused here, before anything is written.
    spec = spec_of(name, config)
    if spec.user:  # a user's own stage: its class and its own settings decide its rows too
        out[f"pipeline.{name}.cls"] = spec.cls
        _flatten(f"pipeline.{name}.settings", dict(spec.settings), out)
    for path in declared_output_settings(stage_class(name, config)):
        if not (spec.user and path.split(".")[0] == "settings"):  # its own: recorded above
            _flatten(path, _value(config, path), out)
    return {key: _in_run(value, prefixes) for key, value in sorted(out.items())}


def _digest(payload: Any) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def expected_settings(config: PipelineConfig, order: list[str]) -> dict[str, dict[str, Any]]:
    """Per stage in run order: its inputs, the previous stage's digest and its own digest."""
    return _chain({name: stage_inputs(name, config) for name in order})


def _chain(inputs_of: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    expected: dict[str, dict[str, Any]] = {}
    upstream = ""
    for name, inputs in inputs_of.items():
        digest = _digest({"inputs": inputs, "upstream": upstream})
        expected[name] = {"stage": name, "digest": digest, "upstream": upstream, "inputs": inputs}
        upstream = digest
    return expected


def _earlier_pools(config: PipelineConfig, order: list[str]) -> list[dict[str, dict[str, Any]]]:
    """The settings each stage recorded when the run had only the first k of today's sources
    (k = 1 .. n-1): a stage on disk matching one was made from an earlier, smaller pool, and is
    extended with the new images instead of being redone (`APPENDABLE`)."""
    inputs_of = {name: stage_inputs(name, config) for name in order}
    sources = next((i[APPENDABLE] for i in inputs_of.values() if APPENDABLE in i), None)
    if not isinstance(sources, list):
        return []
    pools = []
    for k in range(1, len(sources)):
        fewer = {
            name: {**i, APPENDABLE: sources[:k]} if APPENDABLE in i else i for name, i in inputs_of.items()
        }
        pools.append(_chain(fewer))
    return pools


def settings_path(run: str | Path, stage: str) -> Path:
    return io.stage_dir(run, stage) / SETTINGS_FILE


def _has_outputs(run: Path, stage: str) -> bool:
    folder = io.stage_dir(run, stage)
    return folder.is_dir() and any(p.name != SETTINGS_FILE for p in folder.iterdir())


def describe_change(old: dict[str, Any], new: dict[str, Any]) -> str:
    """`key old -> new` for each differing input; else the earlier stage that changed."""
    before, after = old.get("inputs", {}), new["inputs"]
    changes = [
        f"{key} {json.dumps(before.get(key, '<unset>'))} -> {json.dumps(after.get(key, '<unset>'))}"
        for key in sorted(set(before) | set(after))
        if before.get(key, "<unset>") != after.get(key, "<unset>")
    ]
    return "; ".join(changes) if changes else "the settings of an earlier stage"


def recorded_settings(run: str | Path, order: list[str]) -> dict[str, dict[str, Any] | None]:
    """Per stage: what it recorded (`{}` for a stage on disk from before the guard), None when the
    stage is not on disk."""
    run = Path(run)
    return {s: (_recorded(run, s) or {}) if io.stage_dir(run, s).exists() else None for s in order}


def _recorded(run: Path, stage: str) -> dict[str, Any] | None:
    path = settings_path(run, stage)
    return json.loads(path.read_text()) if path.exists() else None


def _changed(run: Path, order: list[str], stage: str, why: str, *, build: bool = False) -> SettingsChanged:
    position = order.index(stage)
    later = [f"{run / s}" for s in order[position + 1 :] if io.stage_dir(run, s).exists()]
    remove = " ".join([str(run / stage), *later])
    rebuild = (
        "rerun with --rebuild-changed (flow parameter rebuild_changed) to redo it and the stages after it "
        f"here (the old outputs are moved to {run / io.REPLACED_DIR}), "
        if build
        else ""
    )
    return SettingsChanged(
        f"stage {stage} in {run} was produced with other settings: {why}. "
        f"Use a new run directory, {rebuild}or delete {remove} to redo it with the new settings"
    )


def _warn_unrecorded(run: Path, unrecorded: list[str]) -> None:
    if unrecorded:
        log.warning(
            "run directory %s predates the settings guard (no %s in %s): its outputs are kept unchecked",
            run,
            SETTINGS_FILE,
            ", ".join(unrecorded),
        )


@dataclass
class RunAssessment:
    """What a build finds on a run directory, before any work (`assess_run`)."""

    expected: dict[str, dict[str, Any]]  # what each stage of the order records when it starts
    extend: list[str] = field(default_factory=list)  # made from fewer sources: new images are added
    changed: str | None = None  # the first stage on disk made with other settings
    change: str = ""  # what differs there (`describe_change`)
    replaced: list[str] = field(default_factory=list)  # `changed` and every stage after it
    recorded: dict[str, Any] | None = None  # what `changed` recorded (its old digest names the old outputs)


def assess_run(run: str | Path, config: PipelineConfig, order: list[str]) -> RunAssessment:
    """Judge every stage on disk against `config`: the same settings, made from an earlier pool of
    fewer sources (extended), or other settings (the first such stage and all after it must be
    redone). Stages not started, or started without outputs, are never judged."""
    run = Path(run)
    expected = expected_settings(config, order)
    assessment = RunAssessment(expected)
    unrecorded: list[str] = []
    pools: list[dict[str, dict[str, Any]]] | None = None
    for name in order:
        if not _has_outputs(run, name):
            continue
        old = _recorded(run, name)
        if old is None:
            unrecorded.append(name)
            continue
        if old.get("digest") == expected[name]["digest"]:
            continue
        pools = _earlier_pools(config, order) if pools is None else pools
        if any(old.get("digest") == pool[name]["digest"] for pool in pools):
            assessment.extend.append(name)
            continue
        assessment.changed, assessment.recorded = name, old
        assessment.change = describe_change(old, expected[name])
        assessment.replaced = order[order.index(name) :]
        break
    _warn_unrecorded(run, unrecorded)
    return assessment


def check_run_settings(
    run: str | Path, config: PipelineConfig, order: list[str]
) -> dict[str, dict[str, Any]]:
    """Raise `SettingsChanged` for the first stage on disk made with other settings; warn about old dirs.

    Returns what each stage of `order` records when it starts (`expected_settings`)."""
    assessment = assess_run(run, config, order)
    if assessment.changed:
        raise changed_error(run, order, assessment)
    return assessment.expected


def changed_error(run: str | Path, order: list[str], assessment: RunAssessment) -> SettingsChanged:
    """The refusal of a build that found `assessment.changed` (naming `--rebuild-changed`)."""
    return _changed(Path(run), order, str(assessment.changed), assessment.change, build=True)


def _alone_entry(run: Path, config: PipelineConfig, order: list[str], stage: str) -> dict[str, Any]:
    """What `stage` records when run on its own: its inputs under `config`, and as upstream the
    digest recorded by the stage before it (whose outputs on disk it reads), else the config's."""
    position = order.index(stage)
    previous = _recorded(run, order[position - 1]) if position else None
    chain = expected_settings(config, order[: position + 1])
    upstream = previous["digest"] if previous else chain[stage]["upstream"]
    inputs = chain[stage]["inputs"]
    digest = _digest({"inputs": inputs, "upstream": upstream})
    return {"stage": stage, "digest": digest, "upstream": upstream, "inputs": inputs}


def check_stage_settings(
    run: str | Path, config: PipelineConfig, order: list[str], stage: str
) -> dict[str, Any]:
    """One stage run on its own (a stage command, a stage flow): raise `SettingsChanged` when its
    outputs on disk, or the next stage's (which read them), were made with other settings.

    The stages before it are only read, so their settings are taken from their records, not the
    config: `lenses dedupe --run R` after `lenses ingest --source S --run R` needs no `--source`.
    Returns the entry the stage records when it starts."""
    run = Path(run)
    entry = _alone_entry(run, config, order, stage)
    old = _recorded(run, stage)
    if _has_outputs(run, stage) and old is None:
        _warn_unrecorded(run, [stage])
    elif _has_outputs(run, stage) and old.get("digest") != entry["digest"]:
        raise _changed(run, order, stage, describe_change(old, entry))
    following = order[order.index(stage) + 1 :]
    after = _recorded(run, following[0]) if following and _has_outputs(run, following[0]) else None
    if after is not None and after.get("upstream") != entry["digest"]:
        why = describe_change(old, entry) if old else f"the settings of {stage} its outputs were read from"
        raise _changed(run, order, following[0], why)
    return entry


def record_stage_settings(run: str | Path, entry: dict[str, Any]) -> None:
    """Write a stage's checked settings before its first shard (kept as is when they already match)."""
    path = settings_path(run, entry["stage"])
    if path.exists() and json.loads(path.read_text()).get("digest") == entry["digest"]:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    io.atomic_write_json(path, entry)
