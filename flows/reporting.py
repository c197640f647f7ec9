"""What a build shows in the Prefect UI: the funnel (with a link to the build report), one table per
stage, progress per shard.

Every artifact key starts with the run directory's slug (`flows.common.run_slug`), so each
dataset keeps its own history. Tables and the funnel are published by the flow that called the
stage (the build's own run), not by the per-stage subflow, so one run page holds all of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

from flows.common import run_slug
from lenses_data.models.reuse_report import CALLS, REUSED, reuse_sources_line, reused_total


def summary_markdown(summary: dict[str, Any]) -> str:
    """A stage summary as a markdown table: counts, shards processed/skipped, rejections by reason."""
    shards = int(summary.get("shards", 0) or 0)
    skipped = int(summary.get("shards_skipped", 0) or 0)
    lines = [
        f"### Stage `{summary.get('stage', '?')}`",
        "",
        "| records in | records out | rejected | shards | processed now | skipped (already done) |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {summary.get('records_in', 0)} | {summary.get('records_out', 0)} | {summary.get('rejected', 0)} "
        f"| {shards} | {shards - skipped} | {skipped} |",
    ]
    if CALLS in summary:  # a model stage: what it paid, and whose answers it reused
        lines += ["", f"Model calls sent: {summary[CALLS]}; answers reused: {reused_total(summary)}."]
        if summary.get(REUSED):
            lines[-1] += " A" + reuse_sources_line([summary])[1:] + "."
    reasons = summary.get("reasons") or {}
    if reasons:
        lines += ["", "| rejection reason | count |", "|---|---:|"]
        lines += [f"| {reason} | {count} |" for reason, count in sorted(reasons.items())]
    return "\n".join(lines)


def report_path(run_dir: str, summaries: list[dict[str, Any]]) -> Path | None:
    """The build report the export of this build wrote (lenses_data.publish.report), if it got that far."""
    index = Path(run_dir).resolve() / "export" / "report" / "index.html"
    exported = any(item.get("stage") == "export" for item in summaries)
    return index if exported and index.exists() else None


def funnel_markdown(summaries: list[dict[str, Any]], run_dir: str = "", report: Path | None = None) -> str:
    title = f"## Lenses build funnel: `{run_dir}`" if run_dir else "## Lenses build funnel"
    lines = [title, ""]
    if report is not None:
        # The page lives on the build machine's disk: the path to open, and a link for a local UI.
        lines += [
            f"**Build report:** [`{report}`]({report.as_uri()}) (images, texts by lens, rejections)",
            "",
        ]
    lines += [
        "| stage | in | out | rejected | shards | skipped | model calls sent | answers reused |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for item in summaries:
        lines.append(
            f"| {item.get('stage')} | {item.get('records_in', 0)} | {item.get('records_out', 0)} "
            f"| {item.get('rejected', 0)} | {item.get('shards', 0)} | {item.get('shards_skipped', 0)} "
            f"| {item.get(CALLS, 0)} | {reused_total(item)} |"
        )
    sources = reuse_sources_line(summaries)
    return "\n".join([*lines, *(["", sources] if sources else [])])


def stage_key(run_dir: str, stage: str) -> str:
    return f"{run_slug(run_dir)}-stage-{stage.replace('_', '-')}"


def funnel_key(run_dir: str) -> str:
    return f"{run_slug(run_dir)}-funnel"


def progress_key(run_dir: str, stage: str) -> str:
    return f"{run_slug(run_dir)}-progress-{stage.replace('_', '-')}"


def in_flow_run() -> bool:
    from prefect.context import FlowRunContext

    return FlowRunContext.get() is not None


def publish_stage_table(run_dir: str, summary: dict[str, Any]) -> None:
    """The stage's table on the current flow run (the build's run when called from the build)."""
    if not in_flow_run():  # a stage run by a script or benchmark: nothing to attach it to
        return
    from prefect.artifacts import create_markdown_artifact

    stage = str(summary.get("stage", "?"))
    create_markdown_artifact(
        key=stage_key(run_dir, stage),
        markdown=summary_markdown(summary),
        description=f"Lenses stage {stage} of {run_dir}: counts, shards, rejections by reason",
    )


def publish_funnel(run_dir: str, summaries: list[dict[str, Any]]) -> None:
    from prefect.artifacts import create_markdown_artifact

    create_markdown_artifact(
        key=funnel_key(run_dir),
        markdown=funnel_markdown(summaries, run_dir, report_path(run_dir, summaries)),
        description=f"Lenses build funnel of {run_dir}",
    )


def start_progress(run_dir: str, stage: str) -> UUID | None:
    """A progress artifact on the current flow run for a long (model) stage; the subflow updates it."""
    from lenses_data.stages.registry import MODEL_STAGES

    if stage not in MODEL_STAGES or not in_flow_run():
        return None
    from prefect.artifacts import create_progress_artifact

    return create_progress_artifact(
        progress=0.0,
        key=progress_key(run_dir, stage),
        description=f"Lenses stage {stage} of {run_dir}: shards being listed",
    )


def update_progress(artifact_id: UUID | str | None, stage: str, done: int, shards: int) -> None:
    if artifact_id is None or shards == 0:
        return
    from prefect.artifacts import update_progress_artifact

    update_progress_artifact(
        artifact_id=UUID(str(artifact_id)),
        progress=round(100.0 * done / shards, 1),
        description=f"Lenses stage {stage}: {done}/{shards} shards",
    )
