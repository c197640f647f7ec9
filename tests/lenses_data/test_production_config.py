"""configs/production.yaml keeps only what differs from the defaults (issue 34, "each fact once"):
a value equal to its default is a second copy of a fact, which goes stale when the default moves."""

from __future__ import annotations

from pathlib import Path

import yaml

from lenses_data.config import PipelineConfig, load_config

PRODUCTION = Path(__file__).resolve().parents[2] / "configs" / "production.yaml"


def restated_defaults(path: Path) -> list[str]:
    """Dotted paths of the file's values whose resolved setting equals the default's.

    Compared after validation, so `valid: 1100` and a default of 1100.0 count as the same, and a
    partial role section (models.<role>) is compared after it is merged into that role's defaults."""
    written = yaml.safe_load(path.read_text(encoding="utf-8"))
    resolved = load_config(path, environ={}).model_dump()
    return list(_equal_leaves(written, resolved, PipelineConfig().model_dump(), ()))


def _equal_leaves(written: dict, resolved: dict, default: dict, at: tuple[str, ...]):
    for key, value in written.items():
        here = (*at, key)
        mine, theirs = resolved.get(key), default.get(key)
        if isinstance(value, dict) and isinstance(mine, dict) and isinstance(theirs, dict):
            yield from _equal_leaves(value, mine, theirs, here)
        elif mine == theirs:
            yield ".".join(here)


def test_production_restates_no_default():
    assert restated_defaults(PRODUCTION) == []


def test_a_restated_default_is_found(tmp_path: Path):
    # The check itself: restating defaults (a top-level one, a nested one, one inside a merged role
    # section and a whole role section's dict) is reported by path; changed values are not.
    defaults = PipelineConfig()
    text = PRODUCTION.read_text(encoding="utf-8") + "\n".join(
        [
            "",
            f"shard_size: {defaults.shard_size}",
            "yields: {accept: false}",
            "simulator: {seed: 3}",
        ]
    )
    text = text.replace(
        "  validator:                    # Qwen",
        f"  validator:\n    model: {defaults.models.validator.model}\n    max_concurrency: 64  # Qwen",
    )
    path = tmp_path / "production.yaml"
    path.write_text(text, encoding="utf-8")
    found = restated_defaults(path)
    assert found == [
        "models.validator.model",
        "models.validator.max_concurrency",
        "shard_size",
        "yields.accept",
    ]
