"""Config merging, written once: YAML over defaults, environment over YAML, overrides over a file.

Public as `lenses_data.config.deep_merge`; its own module so that the config sections (which
`lenses_data.config` imports) can use it too.
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
