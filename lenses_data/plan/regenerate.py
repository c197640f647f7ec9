"""What regenerating a run directory under a changed config would redo and pay, before running it.

`lenses plan --run RUN --config CHANGED.yaml --rebuild-changed` judges every stage as
`lenses run --rebuild-changed` would (the CLI passes in `settings_guard.assess_run`'s judgement: a
stage module this package may not import): kept, extended with new images
(sources appended), rebuilt (the first stage whose settings differ and every one after it), or not
built yet. For each model stage it bounds the calls a regeneration sends, from the run's journal:

- kept: none; every answer stays.
- rebuilt with its own request settings changed (its model, sampling, image settings or prompt
  template): all of them, none can be reused.
- rebuilt with its own request settings unchanged: from none (its input rows are the same, every
  request is answered from the moved journals) to all (every input row changed, e.g. after an
  upstream model's answers changed). A lowered word limit, for instance, sends none: an image that
  lost a text makes a new validator batch, composed from its texts' earlier answers
  (lenses_data.models.compose).
- extended: the new images' requests only (their number is known once ingest has run).

The GPU-hours are the stage's at the plan's scale (default: the paper's, 1M candidates at Table 1's
yields) times those bounds' share of the stage's requests.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from lenses_data.config.roles import ROLE_OF_STAGE
from lenses_data.plan.schemas import Plan, StageStats

Action = Literal["kept", "extended", "rebuilt", "not built"]


class StageRegeneration(BaseModel):
    stage: str
    action: Action
    why: str
    requests: int = 0  # the stage's requests in the run's journal (model stages)
    sent_min: int = 0
    sent_max: int = 0
    gpu_hours: float = 0.0  # the whole stage at the plan's scale
    gpu_hours_min: float = 0.0
    gpu_hours_max: float = 0.0


def _request_keys(inputs: dict) -> dict:
    """The settings that decide a model stage's requests: its role's and its prompt templates."""
    return {k: v for k, v in inputs.items() if k.startswith(("models.", "prompt:"))}


def _bounds(stage: str, action: Action, own_changed: bool, requests: int) -> tuple[int, int, str]:
    if stage not in ROLE_OF_STAGE and action in ("rebuilt", "extended"):
        return 0, 0, f"{action} on CPU, no model call"
    if action == "kept":
        return 0, 0, "kept as it is"
    if action == "extended":
        return 0, requests, "new images only"
    if action == "not built":
        return requests, requests, "built by the next run"
    if own_changed:
        return requests, requests, "its request settings changed: every request is new"
    return 0, requests, "requests with unchanged input are answered from the moved journals"


def regeneration(
    order: list[str],
    assessment: Any,
    recorded: dict[str, dict[str, Any] | None],
    stats: dict[str, StageStats],
) -> list[StageRegeneration]:
    """Per stage of `order`: what `lenses run --rebuild-changed` would do, from `assessment` (the
    settings guard's `assess_run` under the changed config) and what each stage `recorded` (its
    `_SETTINGS.json`; None: the stage is not on disk)."""
    rebuilt = set(assessment.replaced)
    out = []
    for stage in order:
        if stage in rebuilt:
            action: Action = "rebuilt"
        elif stage in assessment.extend:
            action = "extended"
        else:
            action = "kept" if recorded.get(stage) is not None else "not built"
        old = (recorded.get(stage) or {}).get("inputs", {})
        own = action == "rebuilt" and _request_keys(old) != _request_keys(
            assessment.expected[stage]["inputs"]
        )
        requests = stats[stage].requests if stage in stats else 0
        low, high, why = _bounds(stage, action, own, requests)
        if stage == assessment.changed:
            why = f"{assessment.change}; {why}"
        out.append(
            StageRegeneration(
                stage=stage, action=action, why=why, requests=requests, sent_min=low, sent_max=high
            )
        )
    return out


def priced(stages: list[StageRegeneration], plan: Plan) -> list[StageRegeneration]:
    """The bounds in GPU-hours of the plan's scale (its stage's hours times the share of requests)."""
    hours = {s.stage: s.gpu_hours for s in plan.stages}
    out = []
    for s in stages:
        full = hours.get(s.stage, 0.0)
        per_request = full / s.requests if s.requests else 0.0
        update = {
            "gpu_hours": full,
            "gpu_hours_min": s.sent_min * per_request,
            "gpu_hours_max": s.sent_max * per_request,
        }
        out.append(s.model_copy(update=update))
    return out


def format_regeneration(stages: list[StageRegeneration], plan: Plan) -> str:
    lines = [
        f"regenerate {plan.run} with the changed config: per stage, what is redone and the calls it sends "
        f"(GPU-hours at {plan.candidates:,.0f} candidates, {plan.yields} yields)",
        "",
        f"{'stage':<16}{'action':<11}{'requests':>9}{'sent':>13}{'reused':>13}{'GPU-h':>15}  why",
    ]
    for s in stages:
        model = s.stage in ROLE_OF_STAGE
        sent = f"{s.sent_min}-{s.sent_max}" if s.sent_min != s.sent_max else f"{s.sent_min}"
        reused = f"{s.requests - s.sent_max}-{s.requests - s.sent_min}" if s.sent_min != s.sent_max else (
            f"{s.requests - s.sent_min}")  # fmt: skip
        hours = (f"{s.gpu_hours_min:.1f}-{s.gpu_hours_max:.1f}" if s.sent_min != s.sent_max
                 else f"{s.gpu_hours_min:.1f}")  # fmt: skip
        cells = (
            f"{s.requests:>9}{sent:>13}{reused:>13}{hours:>15}"
            if model
            else f"{'CPU':>9}{'':>13}{'':>13}{'':>15}"
        )
        lines.append(f"{s.stage:<16}{s.action:<11}{cells}  {s.why}")
    low = sum(s.gpu_hours_min for s in stages)
    high = sum(s.gpu_hours_max for s in stages)
    lines += [
        "",
        f"regeneration: {low:.1f}-{high:.1f} GPU-hours; a new build: {plan.total_gpu_hours:.1f} GPU-hours "
        "(estimated: lenses plan's throughput table and assumptions, below)",
    ]
    return "\n".join(lines)
