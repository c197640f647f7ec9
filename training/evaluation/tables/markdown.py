"""Markdown cells and tables shared by the evaluation reports (report.md and the paper tables)."""

from __future__ import annotations

import math
from typing import Any


def fmt(value: Any, digits: int = 2) -> str:
    """A metric cell: `-` for a missing or NaN value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
