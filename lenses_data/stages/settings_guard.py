"""Settings guard: a rerun on a run directory must use the settings its finished shards were made with.

Each stage declares `output_settings`: the config paths (and `prompt:<template>` hashes) that
decide its output. When a stage starts, the values and their digest go to `RUN/<stage>/_SETTINGS.json`
(written before its first shard, so a half-finished stage is covered too). A stage's digest also
holds the digest of the stage before it, so a stage whose input changed differs as well.

Before a build does any work, `check_run_settings` compares every stage already on disk with the
current settings and stops at the first one that differs (a `SettingsChanged`, a config error:
exit code 2 from `lenses run` and every stage command). A stage run on its own
(`check_stage_settings`) is compared with its own outputs and the next stage's; the stages before it
are only read. Run directories written before this guard (no file) are accepted with one warning.
Callers go through `lenses_data.stages.entry`, which holds the run lock around the check.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from lenses_data import io
from lenses_data.config import ConfigError, PipelineConfig

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


class SettingsChanged(ConfigError):
    """A stage on disk was produced with other settings than this run's."""


def _value(config: PipelineConfig, path: str) -> Any:
    if path.startswith(PROMPT):
        from lenses_data.annotation.prompts import get_template

        return get_template(path[len(PROMPT) :]).hash
    node: Any = config
    for part in path.split("."):
        node = getattr(node, part)
    return node.model_dump(mode="json") if hasattr(node, "model_dump") else node


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


def stage_inputs(name: str, config: PipelineConfig) -> dict[str, Any]:
    """The readable settings that decide stage `name`'s output, one dotted key per value."""
    from lenses_data.config.pipeline import spec_of
    from lenses_data.stages.registry import stage_class

    run = Path(config.run_dir)
    prefixes = tuple(dict.fromkeys([str(run.resolve()), str(run.absolute()), str(run)]))
    out: dict[str, Any] = {}
    spec = spec_of(name, config)
    if spec.user:  # a user's own stage: its class and its own settings decide its rows too
        out[f"pipeline.{name}.cls"] = spec.cls
        _flatten(f"pipeline.{name}.settings", dict(spec.settings), out)
    for path in getattr(stage_class(name, config), "output_settings", ()):
        if not (spec.user and path.split(".")[0] == "settings"):  # its own: recorded above
            _flatten(path, _value(config, path), out)
    return {key: _in_run(value, prefixes) for key, value in sorted(out.items())}


def _digest(payload: Any) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def expected_settings(config: PipelineConfig, order: list[str]) -> dict[str, dict[str, Any]]:
    """Per stage in run order: its inputs, the previous stage's digest and its own digest."""
    expected: dict[str, dict[str, Any]] = {}
    upstream = ""
    for name in order:
        inputs = stage_inputs(name, config)
        digest = _digest({"inputs": inputs, "upstream": upstream})
        expected[name] = {"stage": name, "digest": digest, "upstream": upstream, "inputs": inputs}
        upstream = digest
    return expected


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


def _recorded(run: Path, stage: str) -> dict[str, Any] | None:
    path = settings_path(run, stage)
    return json.loads(path.read_text()) if path.exists() else None


def _changed(run: Path, order: list[str], stage: str, why: str) -> SettingsChanged:
    position = order.index(stage)
    later = [f"{run / s}" for s in order[position + 1 :] if io.stage_dir(run, s).exists()]
    remove = " ".join([str(run / stage), *later])
    return SettingsChanged(
        f"stage {stage} in {run} was produced with other settings: {why}. "
        f"Use a new run directory, or delete {remove} to redo it with the new settings"
    )


def _warn_unrecorded(run: Path, unrecorded: list[str]) -> None:
    if unrecorded:
        log.warning(
            "run directory %s predates the settings guard (no %s in %s): its outputs are kept unchecked",
            run,
            SETTINGS_FILE,
            ", ".join(unrecorded),
        )


def check_run_settings(
    run: str | Path, config: PipelineConfig, order: list[str]
) -> dict[str, dict[str, Any]]:
    """Raise `SettingsChanged` for the first stage on disk made with other settings; warn about old dirs.

    Returns what each stage of `order` records when it starts (`expected_settings`)."""
    run = Path(run)
    expected = expected_settings(config, order)
    unrecorded = []
    for name in order:
        if not _has_outputs(run, name):
            continue
        old = _recorded(run, name)
        if old is None:
            unrecorded.append(name)
        elif old.get("digest") != expected[name]["digest"]:
            raise _changed(run, order, name, describe_change(old, expected[name]))
    _warn_unrecorded(run, unrecorded)
    return expected


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
