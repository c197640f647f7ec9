"""Config merging, written once: YAML over defaults, environment over YAML, overrides over a file.

Public as `lenses_data.config.deep_merge` too. It sits at the root of lenses_data/, importing
nothing, so that the config sections can use it and so that the retriever's config
(`training.retriever.config`) can merge its YAML without importing `lenses_data.config`, whose
package pulls in every pipeline section (yields, the simulator, the schemas).
"""

from __future__ import annotations

from typing import Any


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`base` updated by `extra`, recursing where both hold a dict; neither input is modified."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
