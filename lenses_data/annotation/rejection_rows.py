"""Rejection rows: one `Rejection` record (stage, record, reason code, message) as a dict, written
once for every stage and for the shared rule and validation logic (`text_checks`, `validation`)."""

from __future__ import annotations

from typing import Any

from lenses_data.schemas import Rejection


def rejection(
    stage: str,
    record_id: str,
    reason: str,
    message: str,
    *,
    image_id: str | None = None,
    raw: str | None = None,
    source: str | None = None,
) -> dict[str, Any]:
    return Rejection(
        stage=stage,
        record_id=record_id,
        reason=reason,
        message=message,
        image_id=image_id,
        raw=raw,
        source=source,
    ).model_dump()


def failed_result_rejection(stage: str, record_id: str, result: Any, image_id: str | None) -> dict[str, Any]:
    """A failed ModelResult as a rejection row: its reason code, message and raw answer kept."""
    return rejection(
        stage,
        record_id,
        result.error_code or "model_error",
        f"{result.error_message or 'model call failed'} (after {result.attempts} attempt(s))",
        image_id=image_id,
        raw=result.raw,
    )
