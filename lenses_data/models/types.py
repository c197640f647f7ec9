"""Request, result and error types shared by the model client, the stages and the simulator."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from lenses_data.config.roles import ROLES

# Reason codes a failed ModelResult can carry (stages turn them into Rejection.reason).
TRANSPORT_ERROR = "transport_error"  # connection refused/reset, dropped mid-answer
TIMEOUT = "timeout"
RATE_LIMITED = "rate_limited"  # 429 after all attempts
SERVER_ERROR = "server_error"  # 5xx after all attempts
CLIENT_ERROR = "client_error"  # 4xx other than 429: the request itself is wrong, never retried
# 401/403/404: a wrong key, model name or URL refuses every request alike, so it is no item's fault.
ENDPOINT_REFUSED = "endpoint_refused"
EMPTY_ANSWER = "empty_answer"
TRUNCATED = "truncated"  # finish_reason == "length"
INVALID_JSON = "invalid_json"
SCHEMA_INVALID = "schema_invalid"
INVALID_CHOICE = "invalid_choice"
BAD_INPUT = "bad_input"  # e.g. unreadable image file: never sent
INTERNAL_ERROR = "internal_error"  # a bug in the client or a parse function, logged with traceback
REASON_CODES: tuple[str, ...] = (
    TRANSPORT_ERROR,
    TIMEOUT,
    RATE_LIMITED,
    SERVER_ERROR,
    CLIENT_ERROR,
    ENDPOINT_REFUSED,
    EMPTY_ANSWER,
    TRUNCATED,
    INVALID_JSON,
    SCHEMA_INVALID,
    INVALID_CHOICE,
    BAD_INPUT,
    INTERNAL_ERROR,
)

# Failures of the service, not of an answer: after the retries they fail the shard (nothing is
# written, the rerun asks again) instead of becoming rejections.
INFRASTRUCTURE_CODES: frozenset[str] = frozenset(
    {TRANSPORT_ERROR, TIMEOUT, RATE_LIMITED, SERVER_ERROR, ENDPOINT_REFUSED}
)
# Failures that are about one item when they are rare, and about the request, server or model when
# most of a batch gets them (models/systemic.py): a 4xx, and the answer errors.
ANSWER_CODES: frozenset[str] = frozenset(
    {EMPTY_ANSWER, TRUNCATED, INVALID_JSON, SCHEMA_INVALID, INVALID_CHOICE}
)

SIMULATOR_FINGERPRINT = "lenses-simulator"
# Sent with every call so a server log (and the simulator's stats) can name the item.
KEY_HEADER = "X-Lenses-Request-Key"
SIMULATED_MODEL_PREFIX = "simulated/"


class AnswerError(Exception):
    """Raised by a parse function for a bad answer; the client re-asks, then records the code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class ModelRequest(BaseModel):
    """One chat request. Static instructions (`text`) go before the image so vLLM can reuse the
    prefix cache across images; the per-item part (`after_image_text`) goes after it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(description="Deterministic id, e.g. f'{stage}:{image_id}:{candidate}'")
    role: str = Field(description=" | ".join(ROLES))
    system: str | None = None
    text: str
    image_path: str | None = None
    after_image_text: str | None = None
    json_schema: dict[str, Any] | None = None
    choice: list[str] | None = None
    n: int = Field(default=1, ge=1)
    seed: int | None = None
    # Independent items asked together (a validator's batch): the answer is a JSON array with one
    # element per part, each the answer that part would get asked alone. Not in the request hash;
    # lets an answer be composed from earlier answers item by item (lenses_data.models.compose).
    parts: tuple[ModelRequest, ...] = ()
    part_hashes: tuple[str, ...] = ()  # the parts' request hashes (set by the client, journaled)


class ModelResult(BaseModel):
    """The outcome of one request: an answer (`ok`) or a failure with a reason code. Never None.

    For n > 1, `value` is the list of parsed choices and `raw` the JSON list of raw answers."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    key: str
    ok: bool
    value: Any = None
    raw: str | None = None
    error_code: str | None = None
    error_message: str | None = None
    attempts: int = 0
    model: str = ""
    simulated: bool = False
    usage: dict[str, int] = Field(default_factory=dict)
    cached: bool = Field(default=False, description="Answer replayed from the journal (no call made)")
    reused_from: str = Field(default="", description="The earlier run whose journal gave the answer")
    request_hash: str = ""


class ModelServiceError(RuntimeError):
    """A model role's endpoint cannot do the work: the shard fails, nothing is written or rejected.

    Expected operational failures (an outage, a server lacking a feature): commands print the
    message and exit non-zero without a traceback. Picklable, so it crosses Dask/Ray workers."""

    def __init__(self, message: str, *, role: str = "", urls: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.role = role
        self.urls = tuple(urls)

    def __reduce__(self) -> tuple[Any, ...]:
        return (self.__class__, (self.message,), self.__dict__)

    def __str__(self) -> str:
        return self.message


class EndpointUnavailable(ModelServiceError):
    """Requests ended in 5xx, timeouts, refused connections or 401/403/404 after all retries."""

    def __init__(
        self,
        message: str,
        *,
        role: str = "",
        urls: tuple[str, ...] = (),
        code: str = "",
        failed: int = 0,
        answered: int = 0,
    ) -> None:
        super().__init__(message, role=role, urls=urls)
        self.code = code
        self.failed = failed
        self.answered = answered


class CapabilityMissing(ModelServiceError):
    """The endpoint answers, but cannot do what the role needs and no fallback works (the probe)."""

    def __init__(
        self, message: str, *, role: str = "", urls: tuple[str, ...] = (), capability: str = ""
    ) -> None:
        super().__init__(message, role=role, urls=urls)
        self.capability = capability


class SystemicFailure(ModelServiceError):
    """Most of a batch's requests failed the same way: the request, the server or the model is
    broken, not the items. The shard fails with the evidence instead of rejecting its records.

    Raised for a 4xx that the requests keep getting (context overflow, a refused field) and for
    answer errors (invalid choice, empty, truncated, invalid JSON) at a rate no working model
    produces. The same on every attempt: never retried by the flow."""

    def __init__(
        self,
        message: str,
        *,
        role: str = "",
        urls: tuple[str, ...] = (),
        counts: dict[str, int] | None = None,
        decided: int = 0,
    ) -> None:
        super().__init__(message, role=role, urls=urls)
        self.counts = dict(counts or {})
        self.decided = decided


class AnswerClient(Protocol):
    """What a model stage asks of its client (`lenses_data.models.client.ModelClient`)."""

    def run_sync(
        self, requests: Sequence[ModelRequest], parse: Callable[[str], Any]
    ) -> list[ModelResult]: ...

    def close(self) -> None: ...
