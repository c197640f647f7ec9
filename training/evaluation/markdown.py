"""Markdown cells, rows and tables shared by the evaluation reports (report.md and the paper tables)."""

from __future__ import annotations

import math
from typing import Any

from lenses_data.schemas import LENS_KEYS, LENS_NAMES

# The per-lens column groups of the papers' tables: (title, metrics key), the five lenses and All.
LENS_COLS = (*zip(LENS_NAMES, LENS_KEYS, strict=True), ("All", "all"))


def fmt(value: Any, digits: int = 2) -> str:
    """A metric cell: `-` for a missing or NaN value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def table_row(label: str, metrics: dict | None, keys: list[str], note: str, digits: int = 2) -> list[str]:
    """A paper-table row: the label, one cell per metrics key (`—` for every cell when the row has no
    numbers), and its note."""
    cells = ["—" for _ in keys] if metrics is None else [fmt(metrics.get(k), digits) for k in keys]
    return [label, *cells, note]
