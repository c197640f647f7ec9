"""The supplementary's published outputs (Figs. 5 and 7 of shared/seeds/000_*.txt), parsed at test
time and never copied into the repository. Used by the paper-example and idiom-reading tests."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

FIGURE_LINE = re.compile(r"^Figure (\d+)\. (.*)$")
ITEM = re.compile(r"<p>(\w+) \u2192 (.*?)</p>")
ARROW_ITEM = re.compile(r"<p>(\w+) \u2192")


def seeds_dir() -> Path | None:
    """shared/seeds beside the checkout: the nearest ancestor of this file that has one (the main
    checkout sits at /work/main, worktrees at /work/wt/<name>, the seeds at /work/shared/seeds)."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "shared" / "seeds").is_dir():
            return parent / "shared" / "seeds"
    return None


@dataclass
class Figure:
    number: int
    caption: str
    raw_rows: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        """What the figure shows, from its own caption: "caption samples" or "prompt samples"."""
        if "prompt samples" in self.caption:
            return "prompt"
        if "caption samples" in self.caption:
            return "caption"
        raise ValueError(f"Figure {self.number}: cannot tell captions from prompts: {self.caption!r}")

    @property
    def rows(self) -> list[list[tuple[str, str]]]:
        return [ITEM.findall(row) for row in self.raw_rows]


def supplementary() -> Path:
    seeds = seeds_dir()
    found = sorted(seeds.glob("000_*.txt")) if seeds else []
    if not found:
        pytest.skip("the supplementary text (shared/seeds/000_*.txt) is not beside this checkout")
    return found[0]


def parse_figures(text: str) -> dict[int, Figure]:
    """Rows of <p>Lens -> text</p> items belong to the first "Figure N." line after them (the
    extraction puts a figure's caption below its content)."""
    figures: dict[int, Figure] = {}
    pending: list[str] = []
    for line in text.splitlines():
        if "<p>" in line:
            pending.append(line.strip())
            continue
        match = FIGURE_LINE.match(line.strip())
        if match:
            number = int(match.group(1))
            figures[number] = Figure(number, match.group(2), pending)
            pending = []
    assert not pending, "example rows after the last figure caption"
    return figures


def paper_examples() -> dict[str, list[list[tuple[str, str]]]]:
    """kind -> one list of (lens, text) per published image."""
    figures = parse_figures(supplementary().read_text(encoding="utf-8"))
    return {f.kind: f.rows for f in figures.values() if f.raw_rows}


def published_texts() -> list[tuple[str, str, str]]:
    """(kind, lens, text) for every published text, in figure order."""
    return [
        (kind, lens, text) for kind, rows in paper_examples().items() for row in rows for lens, text in row
    ]
