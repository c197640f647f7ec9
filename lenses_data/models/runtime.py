"""What one role's requests run with (`RoleRuntime`): its config, endpoints, journal, the earlier
runs' answers and what the probe found. Built by the client per role and batch; read by calls.py
(a request's life) and journaled.py (answers taken from journals)."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from lenses_data.config.models import RetryConfig, RoleConfig
from lenses_data.models.endpoints import EndpointPool
from lenses_data.models.images import ImagePrefetch
from lenses_data.models.journal import Journal, JournalEntry
from lenses_data.models.reuse import AnswerIndex


@dataclass
class RoleRuntime:
    name: str
    role: RoleConfig
    pool: EndpointPool
    choice_style: str
    retry: RetryConfig
    journal: Journal | None
    reuse_failed: bool
    rng: random.Random
    simulated_endpoint: bool | None = None
    # How JSON is asked for (messages.JSON_MODES): the config's mode, or the probe's fallback.
    json_mode: str = "json_schema"
    # The server ignores the choice constraint (probe): find the choice in free-text answers.
    tolerant_choice: bool = False
    # Durable write of a completed request (direct, or via the group committer when fsyncing).
    journal_put: Callable[[JournalEntry], Awaitable[None]] | None = None
    images: ImagePrefetch | None = None  # the batch's images, loaded ahead of its requests
    # The served context of the role's model (the probe reads vLLM's /v1/models): a re-ask is cut
    # to fit it. None: unknown, re-asks are sent whole.
    context_tokens: int | None = None
    # The served model as listed (reuse.served_identity), journaled with each answer; and the
    # earlier runs' answers (models.reuse_answers_from) looked up before a request is sent.
    served: str | None = None
    reuse: AnswerIndex | None = None
