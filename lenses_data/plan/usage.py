"""What a run measured: per model stage, the journals' requests and token usage, and the funnel
(candidates -> images the filter saw -> selected -> test) from the stage markers."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lenses_data import io
from lenses_data.annotation.prompts import TEMPLATE_OF_KIND
from lenses_data.annotation.rules import TEXT_VALIDATION, VISUAL_VALIDATION
from lenses_data.config.paper import PAPER
from lenses_data.config.pipeline import DEDUPE, FILTER, GENERATE, INGEST, SPLIT, VALIDATE, VISUAL_VALIDATE
from lenses_data.config.roles import ROLE_OF_STAGE
from lenses_data.models.journal import JournalEntry, read_run_journal
from lenses_data.plan.schemas import Funnel, PlanError, StageStats

# The template of each model stage's requests (generate: one per text kind), for its static words.
TEMPLATES = {
    FILTER: "filter",
    **{f"{GENERATE}:{kind}": template for kind, template in TEMPLATE_OF_KIND.items()},
    VALIDATE: TEXT_VALIDATION,
    VISUAL_VALIDATE: VISUAL_VALIDATION,
}
SIMULATED_PREFIX = "simulated/"


def _template_words(name: str) -> int:
    from lenses_data.annotation.prompts import get_template

    return len(get_template(name).text.split())


def _entry_stage(key: str) -> tuple[str, str]:
    parts = key.split(":")
    return parts[0], (parts[2] if len(parts) > 2 else "")


def read_stage_stats(run: str | Path, entries: Iterable[JournalEntry] | None = None) -> dict[str, StageStats]:
    """Per model stage: requests, failures, prompt/completion usage and the static prefix's words,
    over `entries` (default: the run's journal, read here)."""
    stats: dict[str, StageStats] = {}
    words: dict[str, int] = {}
    for entry in read_run_journal(run) if entries is None else entries:
        stage, kind = _entry_stage(entry.key)
        if stage not in ROLE_OF_STAGE:
            continue
        model = entry.model.removeprefix(SIMULATED_PREFIX)
        s = stats.setdefault(stage, StageStats(stage=stage, role=ROLE_OF_STAGE[stage], model=model))
        template = TEMPLATES.get(f"{stage}:{kind}", TEMPLATES.get(stage))
        if template not in words:  # a stage without a template here: no static prefix counted
            words[template] = _template_words(template) if template else 0
        s.requests += 1
        s.failed += entry.status != "ok"
        s.simulated += bool(entry.simulated)
        s.prompt += int(entry.usage.get("prompt_tokens", 0))
        s.completion += int(entry.usage.get("completion_tokens", 0))
        s.prefix_words += words[template]
        if "cached_tokens" in entry.usage:  # vLLM --enable-prompt-tokens-details, the simulator
            s.cached += int(entry.usage["cached_tokens"])
            s.cached_reported += 1
        if stage == GENERATE and entry.key.count(":") >= 3:
            s.answers_per_image = max(s.answers_per_image, int(entry.key.split(":")[3]) + 1)
    return stats


def _stat(marker: dict[str, Any] | None, *names: str) -> float | None:
    values = (marker or {}).get("stats", {})
    for name in names:
        if isinstance(values.get(name), int | float):
            return float(values[name])
    return None


def run_funnel(run: str | Path, answers_per_image: int = 1) -> Funnel:
    """Candidates and the images each model stage saw, from the run's success markers."""
    ingest, dedupe = io.read_marker(run, INGEST), io.read_marker(run, DEDUPE)
    filt, split = io.read_marker(run, FILTER), io.read_marker(run, SPLIT)
    if filt is None:
        raise PlanError(f"{run}: no finished filter stage (filter/{io.SUCCESS_MARKER}); nothing to plan from")
    filter_images = _stat(filt, "records_in", "decided") or 0.0
    candidates = _stat(ingest, "accepted") or _stat(dedupe, "images_in") or filter_images
    selected = _stat(split, "images") or _stat(filt, "records_out", "passed") or 0.0
    test = float(((split or {}).get("stats", {}).get("counts") or {}).get("test", 0))
    if not candidates:
        raise PlanError(f"{run}: the filter saw no images")
    return Funnel(
        candidates=candidates,
        filter_images=filter_images,
        selected_images=selected,
        test_images=test,
        answers_per_image=answers_per_image,
    )


def target_funnel(run_f: Funnel, candidates: float, yields: str, answers_per_image: int) -> Funnel:
    """The funnel of a build of `candidates`: the run's yields scaled, or the paper's (Table 1)."""
    if yields == "run":
        k = candidates / run_f.candidates
        return Funnel(
            candidates=candidates,
            filter_images=run_f.filter_images * k,
            selected_images=run_f.selected_images * k,
            test_images=run_f.test_images * k,
            answers_per_image=answers_per_image,
            source="run",
        )
    if yields == "paper":
        # Every candidate reaches the filter (the paper filtered before dedupe; dedupe first only
        # removes work), and the paper's shares pass it and land in test.
        selected = candidates * PAPER["images"] / PAPER["candidates"]
        return Funnel(
            candidates=candidates,
            filter_images=candidates,
            selected_images=selected,
            test_images=selected * PAPER["test_images"] / PAPER["images"],
            answers_per_image=answers_per_image,
            source="paper Table 1",
        )
    raise PlanError(f"unknown yields {yields!r}; expected run or paper")
