"""Tell a broken request, server or model from bad items: a batch's failure rate.

A 4xx about one item (one image too large for the context) or a bad answer about one item is a
rejection with a reason. The same 4xx on most requests (a refused field, a context every prompt
overflows) or answer errors on most of a batch (a constraint the server ignored, an untrained model)
say nothing about the items: rejecting them would turn a broken deployment into an empty dataset
with exit 0. `FailureWatch` counts a batch's outcomes as they arrive and names the systemic case,
so the client can stop sending and fail the shard with the evidence (`SystemicFailure`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from lenses_data.config.models import RetryConfig
from lenses_data.models import types as codes
from lenses_data.models.types import ModelResult, SystemicFailure

# Two requests refused alike already say "the request is wrong" when they are most of the batch.
CLIENT_ERROR_MIN = 2
_SAMPLES = 3


@dataclass
class FailureWatch:
    role: str
    min_failures: int
    max_share: float
    counts: Counter[str] = field(default_factory=Counter)
    decided: int = 0
    samples: list[str] = field(default_factory=list)

    @classmethod
    def for_retry(cls, role: str, retry: RetryConfig) -> FailureWatch:
        return cls(role, retry.systemic_min_failures, retry.systemic_share)

    def record(self, result: ModelResult) -> None:
        self.decided += 1
        if result.ok or result.error_code is None:
            return
        self.counts[result.error_code] += 1
        if result.error_code in _WATCHED and len(self.samples) < _SAMPLES:
            self.samples.append(_evidence(result))

    @property
    def failures(self) -> int:
        return sum(n for code, n in self.counts.items() if code in _WATCHED)

    def systemic(self) -> bool:
        """True once the batch's failures cannot be the items' fault."""
        if not self.decided:
            return False
        refused = self.counts[codes.CLIENT_ERROR]
        if refused >= CLIENT_ERROR_MIN and refused / self.decided >= self.max_share:
            return True
        failures = self.failures
        return failures >= self.min_failures and failures / self.decided >= self.max_share

    def error(self, urls: tuple[str, ...]) -> SystemicFailure:
        counted = ", ".join(f"{code} {n}" for code, n in self.counts.most_common() if code in _WATCHED)
        evidence = "; ".join(self.samples)
        message = (
            f"model role {self.role!r} at {', '.join(urls)}: {self.failures} of {self.decided} answered "
            f"requests failed ({counted}), a rate no working model and server produce: the request, "
            "the server or the model is wrong, not the items. Nothing is written or rejected for this "
            f"shard; `lenses check` probes the role. Evidence: {evidence}"
        )
        return SystemicFailure(
            message, role=self.role, urls=urls, counts=dict(self.counts), decided=self.decided
        )


_WATCHED = frozenset({codes.CLIENT_ERROR, *codes.ANSWER_CODES})


def _evidence(result: ModelResult) -> str:
    if result.error_code == codes.CLIENT_ERROR:
        return f"{result.error_code}: {(result.error_message or '')[:240]}"
    said = " ".join((result.raw or "").split())[:80]
    return f"{result.error_code}: {(result.error_message or '')[:120]} (answered {said!r})"
