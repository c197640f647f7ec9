"""The base of the model stages (filter, generate, validate, visual_validate), in the style of
distilabel's tasks: a stage declares its `role` and `template`, says how one unit of work becomes a
request (`build_request`, distilabel's format_input) and how an answer becomes rows
(`to_rows`, its format_output); the loop (request -> answer -> zip -> reject) is written here once.

Hooks where a stage genuinely differs, each a small override rather than a copy of the loop:
`units` (what one request is about: a row, generate's row x kind x candidate, a validator's batch
of texts), `answer_shape` (requests sharing a parse function are asked together),
`failed_rejections` (the rows naming a failed call), `reask` (a unit whose answer a smaller request
may cure, asked again once in smaller units: the validators' batches, item by item) and
`after_answers` (generate drops a repeated item).

An infrastructure failure (5xx, timeout, refused connection after the retries) is never an answer:
the client raises and the shard fails, and a result carrying such a code fails it here too.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from lenses_data.annotation.rejection_rows import failed_result_rejection
from lenses_data.models import types as codes
from lenses_data.models.types import EndpointUnavailable, ModelRequest
from lenses_data.stages.base import ShardedStage

Rows = list[dict[str, Any]]


class AnnotationStage(ShardedStage):
    """A row stage that asks the model of `role` with the prompt `template` (its listing)."""

    role: str = ""
    template: str = ""

    def units(self, rows: Rows) -> list[Any]:
        """The units of work, one request each; by default one per input row."""
        return list(rows)

    def build_request(self, unit: Any) -> ModelRequest:
        raise NotImplementedError

    def answer_shape(self, unit: Any) -> Hashable:
        """Units whose answers one parse function reads share a shape (one `run_sync` call each)."""
        return None

    def parse_answer(self, raw: str, shape: Hashable) -> Any:
        raise NotImplementedError

    def to_rows(self, unit: Any, result: Any) -> tuple[Rows, Rows]:
        """A usable answer about `unit` -> (output rows, rejections)."""
        raise NotImplementedError

    def failed_rejections(self, unit: Any, request: ModelRequest, result: Any) -> Rows:
        """The rejections recording a call that gave no usable answer (its reason and raw text), one
        per record the unit is about; by default the unit is one row."""
        return [failed_result_rejection(self.name, request.key, result, unit["image_id"])]

    def reask(self, unit: Any, result: Any) -> list[Any]:
        """Smaller units to ask instead when this answer may be cured by asking again in parts
        (asked once, in a second round); by default none: the answer is used as it is."""
        return []

    def after_answers(self, kept: Rows, rejected: Rows) -> tuple[Rows, Rows]:
        return kept, rejected

    def ask(self, units: list[Any], requests: list[ModelRequest]) -> list[Any]:
        """Answers in request order; requests of one shape go to the client together."""
        groups: dict[Hashable, list[int]] = {}
        for index, unit in enumerate(units):
            groups.setdefault(self.answer_shape(unit), []).append(index)
        results: list[Any] = [None] * len(requests)
        for shape, indices in groups.items():
            answers = self.answer_client().run_sync(
                [requests[i] for i in indices], lambda raw, s=shape: self.parse_answer(raw, s)
            )
            for index, answer in zip(indices, answers, strict=True):
                results[index] = answer
        return results

    def annotate_rows(self, rows: Rows) -> tuple[Rows, Rows]:
        """The one loop: units -> requests -> answers, zipped back; a failed call is a rejection;
        units the stage re-asks in parts are asked once more, after the first round."""
        kept: Rows = []
        rejected: Rows = []
        again = self._answer_round(self.units(rows), kept, rejected, may_reask=True)
        self._answer_round(again, kept, rejected, may_reask=False)
        return self.after_answers(kept, rejected)

    def _answer_round(self, units: list[Any], kept: Rows, rejected: Rows, *, may_reask: bool) -> list[Any]:
        """Ask about `units`, adding rows and rejections in unit order; returns the units to re-ask."""
        requests = [self.build_request(unit) for unit in units]
        again: list[Any] = []
        for unit, request, result in zip(units, requests, self.ask(units, requests), strict=True):
            self._refuse_outage(request, result)
            smaller = self.reask(unit, result) if may_reask else []
            if smaller:
                again.extend(smaller)
            elif result.ok:
                out, notes = self.to_rows(unit, result)
                kept.extend(out)
                rejected.extend(notes)
            else:
                rejected.extend(self.failed_rejections(unit, request, result))
        return again

    def _refuse_outage(self, request: ModelRequest, result: Any) -> None:
        """An outage is not an answer about the item: it fails the shard, never a rejection."""
        if result.ok or result.error_code not in codes.INFRASTRUCTURE_CODES:
            return
        raise EndpointUnavailable(
            f"stage {self.name}: request {request.key} ended in {result.error_code} "
            f"({result.error_message or 'no message'}): an outage fails the shard, nothing is written "
            "or rejected; rerun to retry",
            role=self.role,
            code=result.error_code or "",
            failed=1,
        )
