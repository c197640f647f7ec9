"""The probe's requests: one cheap request per capability, straight to one endpoint (not through
the pool, whose breaker must not bench an endpoint for a refused feature), with the run's retries.
See lenses_data.models.probe for what is checked and why."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import random
from dataclasses import dataclass
from typing import Any

from lenses_data.config.models import RetryConfig, RoleConfig
from lenses_data.models import types as codes
from lenses_data.models.dialect import is_mm_kwargs_refusal
from lenses_data.models.endpoints import Endpoint, backoff_delay, classify_error, retry_after_s
from lenses_data.models.messages import schema_instruction
from lenses_data.models.parsing import extract_json
from lenses_data.models.types import AnswerError, EndpointUnavailable

PROBE_SCHEMA: dict[str, Any] = {
    "title": "LensesProbe",
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["ok"]}},
    "required": ["answer"],
    "additionalProperties": False,
}
# Tokens no model says unprompted: an answer that is exactly one of them proves the constraint.
PROBE_CHOICES = ["PROBE-ALPHA", "PROBE-OMEGA"]
_QUESTION = "Is water wet?"
FALLBACK_JSON = {
    "json_schema": ("json_schema", "json_object", "prompt"),
    "json_object": ("json_object", "prompt"),
}


@dataclass
class Check:
    capability: str  # model | json | choice | image | prefix | endpoint
    status: str  # ok | fallback | fail
    detail: str


@dataclass
class _Answer:
    content: str | None = None
    code: str | None = None
    message: str = ""
    prompt_tokens: int | None = None
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens, when reported

    @property
    def answered(self) -> bool:
        return self.code is None


class Prober:
    def __init__(self, name: str, role: RoleConfig, endpoint: Endpoint, retry: RetryConfig) -> None:
        self.name, self.role, self.endpoint, self.retry = name, role, endpoint, retry
        self.rng = random.Random(0)
        self._plain: _Answer | None = None
        self.answered_once = False
        self.simulated = False  # the lenses simulator answers (it does not model image tokens)

    async def ask(
        self,
        content: Any,
        max_tokens: int = 96,
        extra_body: dict[str, Any] | None = None,
        messages: list[dict[str, Any]] | None = None,
    ) -> _Answer:
        """One request straight to the endpoint (no pool: its breaker must not bench it for a
        refused feature), with the run's transport retries. `messages` replace the one user turn
        of `content` (a role's real request, rendered)."""
        kwargs: dict[str, Any] = {
            "model": self.role.model,
            "messages": messages or [{"role": "user", "content": content}],
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "extra_headers": {codes.KEY_HEADER: f"probe:{self.name}"},
        }
        if extra_body:
            kwargs["extra_body"] = extra_body
        answer = _Answer(code=codes.TRANSPORT_ERROR)
        for attempt in range(1, self.retry.max_attempts + 1):
            try:
                completion = await self.endpoint.client.chat.completions.create(**kwargs)
            except Exception as exc:
                code, retryable, _ = classify_error(exc)
                answer = _Answer(code=code, message=f"{type(exc).__name__}: {str(exc)[:200]}")
                if not retryable or attempt == self.retry.max_attempts:
                    return answer
                await asyncio.sleep(backoff_delay(attempt, self.retry, self.rng, retry_after_s(exc)))
                continue
            self.answered_once = True
            choices = completion.choices or []
            usage = completion.usage
            details = getattr(usage, "prompt_tokens_details", None)
            return _Answer(
                content=choices[0].message.content if choices else None,
                prompt_tokens=getattr(usage, "prompt_tokens", None),
                cached_tokens=getattr(details, "cached_tokens", None),
            )
        return answer

    async def plain(self) -> _Answer:
        """A request with no constraint: tells "this feature is refused" from "the server is down"."""
        if self._plain is None:
            self._plain = await self.ask(_QUESTION, max_tokens=8)
        return self._plain

    async def down_unless_plain_works(self, failed: _Answer) -> None:
        plain = await self.plain()
        if not plain.answered:
            raise unavailable(self.name, (self.endpoint.url,), plain.code or failed.code or "", plain.message)

    async def check_json(self, configured: str) -> tuple[Check, str]:
        if configured == "none":
            return Check("json", "ok", "not asked for (json_schema_mode: none)"), "none"
        modes = FALLBACK_JSON.get(configured, (configured,))
        notes = []
        for mode in modes:
            answer = await self.ask(*_json_request(mode))
            if not answer.answered:
                await self.down_unless_plain_works(answer)
                notes.append(f"{mode}: refused ({answer.message[:80]})")
                continue
            if _is_json(answer.content, strict=mode == "json_schema"):
                status = "ok" if mode == modes[0] else "fallback"
                return Check("json", status, "; ".join([*notes, f"{mode} works"])), mode
            notes.append(f"{mode}: answered without JSON ({(answer.content or '')[:40]!r})")
        return Check("json", "fail", "; ".join(notes) or "no JSON mode works"), configured

    async def check_choice(self, style: str) -> tuple[Check, str]:
        """(check, style to send). An ignored constraint is still sent (harmless, and it helps if
        the server only misbehaved during the probe); a refused one is dropped."""
        if style == "none":
            return Check(
                "choice", "ok", "not constrained (structured_outputs: none): tolerant parsing"
            ), "none"
        body = (
            {"structured_outputs": {"choice": PROBE_CHOICES}}
            if style == "structured_outputs"
            else {"guided_choice": PROBE_CHOICES}
        )
        answer = await self.ask("Say hello.", max_tokens=16, extra_body=body)
        if answer.answered and (answer.content or "").strip() in PROBE_CHOICES:
            return Check("choice", "ok", f"{style} choice honoured"), style
        if answer.answered:
            said = (answer.content or "").strip()[:40]
            detail = f"{style} choice ignored (answered {said!r}); tolerant parsing of free text"
            return Check("choice", "fallback", detail), style
        await self.down_unless_plain_works(answer)
        detail = f"{style} choice refused ({answer.message[:80]}); no constraint, tolerant parsing"
        return Check("choice", "fallback", detail), "none"

    async def check_image(self) -> Check:
        content = [{"type": "text", "text": "What colour is this image? One word."}]
        content += self.image_parts(0)
        # As the role's real requests do: a server that refuses the role's processor settings
        # (e.g. the filter's one-tile `mm_processor_kwargs`) must fail here, not on every request.
        answer = await self.ask(content, max_tokens=8, extra_body=self.image_body())
        if not answer.answered:
            await self.down_unless_plain_works(answer)
            hint = ""
            if is_mm_kwargs_refusal(answer.message):
                hint = (
                    ": this release takes per-request mm_processor_kwargs only from a server started with "
                    "--trust-request-mm-kwargs (`lenses serve` adds it for such releases), or drop "
                    f"models.{self.name}.mm_processor_kwargs"
                )
            return Check("image", "fail", f"image part refused ({answer.message[:160]}){hint}; no fallback")
        if not self.role.mm_processor_kwargs:
            return Check("image", "ok", "image part accepted")
        return await self.check_tiles()

    async def check_tiles(self) -> Check:
        """Do the role's processor settings take effect? A wide image costs fewer prompt tokens with
        a tile limit than without it. A key the model's processor does not know (InternVL's
        remote-code processor reads `max_dynamic_patch`, the transformers-format one `max_patches`)
        is accepted and silently ignored by the server: only the token count shows it."""
        processor = self.role.mm_processor_kwargs
        counts = []
        for body in (self.image_body(), None):
            content: list[dict[str, Any]] = [{"type": "text", "text": "Describe the image."}]
            content += self.image_parts(0, wide=True)
            answer = await self.ask(content, max_tokens=1, extra_body=body)
            counts.append(answer.prompt_tokens if answer.answered else None)
        limited, default = counts
        if limited == default and self.simulated:
            return Check("image", "ok", f"image part with mm_processor_kwargs {processor} accepted (tile "
                         "effect not measured: the lenses simulator does not count image tokens)")  # fmt: skip
        if limited is None or default is None:
            return Check("image", "ok", f"image part with mm_processor_kwargs {processor} accepted (tile "
                         "effect not measured: no prompt token count)")  # fmt: skip
        if limited < default:
            return Check("image", "ok", f"mm_processor_kwargs {processor} take effect: a 3:1 image costs "
                         f"{limited} prompt tokens with them, {default} without")  # fmt: skip
        return Check(
            "image",
            "fallback",
            f"mm_processor_kwargs {processor} are accepted but change nothing ({limited} prompt tokens "
            "with and without them): not a setting of this model's processor (remote-code InternVL: "
            "max_dynamic_patch; transformers-format InternVL: max_patches). Runs work, with every tile",
        )

    def image_body(self) -> dict[str, Any] | None:
        """The role's per-request processor settings, as its image requests send them."""
        processor = dict(self.role.mm_processor_kwargs)
        return {"mm_processor_kwargs": processor} if processor else None

    def image_parts(self, variant: int, wide: bool = False) -> list[dict[str, Any]]:
        """The probe image as the role's requests send one: after the role's placeholder, if any
        (a server that counts placeholders must agree with it)."""
        slot = self.role.image_placeholder
        parts: list[dict[str, Any]] = [{"type": "text", "text": slot}] if slot else []
        url = probe_image_uri(variant, (1344, 448) if wide else (32, 32))
        return parts + [{"type": "image_url", "image_url": {"url": url}}]

    async def check_prefix(self, with_image: bool) -> Check:
        """Two requests laid out as the role's are (instructions, placeholder, image or items) that
        differ only after the instructions: how much of the second the server's prefix cache served.
        Catches an image rendered before the instructions, and prefix caching left off.

        vLLM reports `cached_tokens` only for a hit and leaves the field out of a miss, so a silent
        second answer is told apart by a third request repeating it word for word: if the server
        reports a hit for that, the silence was a miss."""
        answers = []
        for variant in (0, 1, 1):
            content: list[dict[str, Any]] = [{"type": "text", "text": _PREFIX_TEXT}]
            if with_image:
                content += self.image_parts(variant)
            content.append({"type": "text", "text": f"Item {variant + 1}: a lighthouse at dusk."})
            answers.append(await self.ask(content, 1, self.image_body() if with_image else None))
            if not answers[-1].answered:
                return Check("prefix", "fallback", f"not measured: {answers[-1].message[:100]}")
        _, second, repeat = answers
        if second.cached_tokens:
            return Check(
                "prefix",
                "ok",
                f"{second.cached_tokens} of {second.prompt_tokens} prompt tokens of a second request "
                "with the same instructions came from the prefix cache",
            )
        if repeat.cached_tokens:
            return Check(
                "prefix",
                "fallback",
                "no prompt token of a second request with the same instructions came from the prefix "
                f"cache, though {repeat.cached_tokens} of a word-for-word repeat did: the image is "
                "rendered before the instructions (set image_placeholder; vLLM: "
                "--chat-template-content-format string). Runs work, at full prefill cost",
            )
        return Check(
            "prefix",
            "ok",
            "not measured: no cached tokens reported even for a word-for-word repeat (prefix caching "
            "off, or not reported; vLLM: --enable-prefix-caching, --enable-prompt-tokens-details)",
        )


# About 150 tokens of fixed instructions: several KV blocks, so a cache hit is visible.
_PREFIX_TEXT = " ".join(
    ["Lenses prefix-cache probe. Read the instructions, then the image or item that follows them."] * 8
)


def _json_request(mode: str) -> tuple[str, int, dict[str, Any] | None]:
    if mode == "json_schema":
        fmt = {"type": "json_schema", "json_schema": {"name": "LensesProbe", "schema": PROBE_SCHEMA}}
        return _QUESTION, 96, {"response_format": fmt}
    text = f"{_QUESTION}\n\n{schema_instruction(PROBE_SCHEMA)}"
    fmt = {"type": "json_object", "schema": PROBE_SCHEMA}
    return text, 96, ({"response_format": fmt} if mode == "json_object" else None)


def _is_json(content: str | None, strict: bool) -> bool:
    """Strict (json_schema honoured): exactly the probe schema. Else: any JSON object."""
    try:
        value = json.loads(content or "") if strict else extract_json(content)
    except (ValueError, AnswerError):
        return False
    if strict:
        return isinstance(value, dict) and value == {"answer": "ok"}
    return isinstance(value, dict)


def probe_image_uri(variant: int = 0, size: tuple[int, int] = (32, 32)) -> str:
    """A flat image; (1344, 448) is three 448 px InternVL tiles wide."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", size, ((200, 30, 30), (30, 90, 200))[variant % 2]).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def unavailable(role: str, urls: tuple[str, ...], code: str, message: str) -> EndpointUnavailable:
    return EndpointUnavailable(
        f"model role {role!r}: endpoint {', '.join(urls)} is unavailable ({code}: {message[:200]}). "
        "Nothing was sent; start or fix the server and rerun.",
        role=role,
        urls=urls,
        code=code,
    )
