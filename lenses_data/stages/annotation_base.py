"""The base of the model stages (filter, generate, validate, visual_validate), in the style of
distilabel's tasks: a stage declares its `role` and `template`, says how one unit of work becomes a
request (`build_request`, distilabel's format_input) and how an answer becomes rows
(`to_rows`, its format_output); the loop (request -> answer -> zip -> reject) is written here once.

Hooks where a stage genuinely differs, each a small override rather than a copy of the loop:
`units` (what one request is about: a row, or generate's row x kind x candidate), `answer_shape`
(requests sharing a parse function are asked together), `failed_rejection` (the row naming a
failed call) and `after_answers` (generate drops a repeated item). The validators batch several
texts per request (a unit is a batch) and re-ask a bad batch item by item: they override
`annotate_rows` with `lenses_data.annotation.validation.validate_rows`, which asks through `ask_units`.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from lenses_data.annotation.rejection_rows import failed_result_rejection
from lenses_data.models.types import ModelRequest
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

    def failed_rejection(self, unit: Any, request: ModelRequest, result: Any) -> dict[str, Any]:
        """The rejection recording a call that gave no usable answer (with its reason and raw text)."""
        return failed_result_rejection(self.name, request.key, result, unit["image_id"])

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

    def ask_units(self, units: list[Any]) -> list[Any]:
        """Answers about `units`, in order (the validators hand this to `validate_rows`)."""
        return self.ask(units, [self.build_request(unit) for unit in units])

    def annotate_rows(self, rows: Rows) -> tuple[Rows, Rows]:
        """The one loop: units -> requests -> answers, zipped back; a failed call is a rejection."""
        units = self.units(rows)
        requests = [self.build_request(unit) for unit in units]
        kept: Rows = []
        rejected: Rows = []
        for unit, request, result in zip(units, requests, self.ask(units, requests), strict=True):
            if result.ok:
                out, notes = self.to_rows(unit, result)
                kept.extend(out)
                rejected.extend(notes)
            else:
                rejected.append(self.failed_rejection(unit, request, result))
        return self.after_answers(kept, rejected)
