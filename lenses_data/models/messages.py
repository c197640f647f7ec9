"""Render a ModelRequest into chat messages and request kwargs, and hash it for the journal."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lenses_data.config.models import RoleConfig
from lenses_data.models.types import ModelRequest

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"BM", "image/bmp"),
    (b"II*\x00", "image/tiff"),
    (b"MM\x00*", "image/tiff"),
)
IMAGE_REF_PREFIX = "sha256:"


@dataclass(frozen=True)
class LoadedImage:
    sha256: str
    data_uri: str


def sniff_mime(data: bytes) -> str:
    """Image MIME type from content (never from the file name)."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    for magic, mime in _MAGIC:
        if data.startswith(magic):
            return mime
    raise ValueError("unrecognised image format")


def load_image(path: str) -> LoadedImage:
    """Read an image file once: its content hash (journal key) and its base64 data URI."""
    data = Path(path).read_bytes()
    mime = sniff_mime(data)
    digest = hashlib.sha256(data).hexdigest()
    return LoadedImage(digest, f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}")


# How a role asks for JSON: the server's json_schema response format (the default), or the probe's
# fallbacks for servers that refuse it: json_object plus the schema in the prompt, or the schema in
# the prompt only. "none": nothing is added (the listing's own wording describes the format).
JSON_MODES: tuple[str, ...] = ("json_schema", "json_object", "prompt", "none")


def default_json_mode(role: RoleConfig) -> str:
    """The JSON mode a role's config asks for, before any probe fallback."""
    mode = role.json_schema_mode
    return "json_schema" if mode == "response_format" else mode


def schema_instruction(schema: dict[str, Any]) -> str:
    """Appended to the prompt when the server cannot be given the schema as a response format."""
    blob = json.dumps(schema, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return f"Reply with only a JSON value that conforms to this JSON schema, and no other text:\n{blob}"


def build_messages(
    request: ModelRequest,
    image_url: str | None,
    json_mode: str = "json_schema",
    placeholder: str | None = None,
) -> list[dict[str, Any]]:
    """Static instructions first, then the image, then the per-item text (prefix-cache friendly).

    When the schema cannot go in the response format it follows the instructions (it belongs to
    them; the per-item text stays last, where readers of the request look for the items).

    `placeholder` (the role's `image_placeholder`) is written as a text part just before the image:
    a server that renders the message as one string (vLLM with InternVL's chat template) keeps the
    image there instead of moving it to the front. The same string inside any text is defused, so
    the server counts exactly one placeholder for the one image."""
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    head = [request.text]
    if request.json_schema is not None and json_mode in ("json_object", "prompt"):
        head.append(schema_instruction(request.json_schema))
    tail = [request.after_image_text] if request.after_image_text else []
    if image_url is None:
        messages.append({"role": "user", "content": "\n\n".join(head + tail)})
        return messages
    if placeholder:
        head, tail = defuse_placeholder(head, placeholder), defuse_placeholder(tail, placeholder)
        head.append(placeholder)
    content: list[dict[str, Any]] = [{"type": "text", "text": text} for text in head]
    content.append({"type": "image_url", "image_url": {"url": image_url}})
    content.extend({"type": "text", "text": text} for text in tail)
    messages.append({"role": "user", "content": content})
    return messages


def defuse_placeholder(texts: list[str], placeholder: str) -> list[str]:
    """`texts` with every occurrence of `placeholder` broken by a space after its first character
    (a caption that says "<image>" must not become a second image slot)."""
    defused = f"{placeholder[0]} {placeholder[1:]}"
    return [text.replace(placeholder, defused) for text in texts]


def sampling_params(request: ModelRequest, role: RoleConfig) -> dict[str, Any]:
    sampling = role.sampling
    seed = request.seed if request.seed is not None else sampling.seed
    params: dict[str, Any] = {
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_tokens": sampling.max_tokens,
        "n": request.n,
    }
    if seed is not None:
        params["seed"] = seed
    return params


def _schema_name(schema: dict[str, Any]) -> str:
    name = re.sub(r"[^a-zA-Z0-9_-]", "_", str(schema.get("title") or "answer"))
    return name[:64] or "answer"


def constraint_kwargs(
    request: ModelRequest, role: RoleConfig, choice_style: str, json_mode: str | None = None
) -> dict[str, Any]:
    """Request-body fields that ask the server for constrained output, all sent via `extra_body`.

    `response_format` goes there too: same JSON on the wire, but the openai package then does not
    walk the (large, nested) JSON schema through its typed-parameter transform on every request,
    which was the largest single CPU cost per request in our profile."""
    mode = default_json_mode(role) if json_mode is None else json_mode
    kwargs: dict[str, Any] = {}
    extra_body: dict[str, Any] = dict(role.sampling.extra)
    if request.json_schema is not None and mode == "json_schema":
        extra_body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": _schema_name(request.json_schema), "schema": request.json_schema},
        }
    elif request.json_schema is not None and mode == "json_object":
        # `schema` beside json_object: llama-cpp-python builds its grammar from it (vLLM ignores it).
        extra_body["response_format"] = {"type": "json_object", "schema": request.json_schema}
    if request.image_path and role.mm_processor_kwargs:
        # vLLM's per-request processor arguments, e.g. InternVL's max_dynamic_patch (tiles per image).
        extra_body["mm_processor_kwargs"] = dict(role.mm_processor_kwargs)
    if request.choice:
        if choice_style == "structured_outputs":
            extra_body["structured_outputs"] = {"choice": list(request.choice)}
        elif choice_style == "guided":
            extra_body["guided_choice"] = list(request.choice)
    if extra_body:
        kwargs["extra_body"] = extra_body
    return kwargs


def request_hash(
    request: ModelRequest,
    role: RoleConfig,
    image_sha256: str | None,
    choice_style: str,
    json_mode: str | None = None,
) -> str:
    """Journal key: model id, rendered messages (image as its content hash), sampling, constraints.

    A probe fallback changes the messages (schema in the prompt) or the constraints, so an answer
    obtained through a fallback never stands in for one asked with the server's constraint."""
    mode = default_json_mode(role) if json_mode is None else json_mode
    image_ref = f"{IMAGE_REF_PREFIX}{image_sha256}" if image_sha256 else None
    payload = {
        "model": role.model,
        "messages": build_messages(request, image_ref, mode, role.image_placeholder),
        "sampling": sampling_params(request, role),
        "constraints": constraint_kwargs(request, role, choice_style, mode),
        "choice": request.choice,
    }
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


# Stands in for an image's data URI while a request body is serialised; the URI (base64, which
# JSON never escapes) is spliced in as bytes afterwards, so its tens of KiB are not re-encoded.
IMAGE_SLOT = "\x00lenses-image\x00"
_SLOT_JSON = json.dumps(IMAGE_SLOT)[1:-1]


def request_fields(
    request: ModelRequest, role: RoleConfig, choice_style: str, json_mode: str | None = None
) -> dict[str, Any]:
    """Every body field except `messages`: model, sampling, and the constraint fields."""
    fields: dict[str, Any] = {"model": role.model, **sampling_params(request, role)}
    fields.update(constraint_kwargs(request, role, choice_style, json_mode).get("extra_body", {}))
    return fields


def render_body(fields: dict[str, Any], messages: list[dict[str, Any]], data_uri: str | None) -> bytes:
    """The JSON request body. `messages` carry IMAGE_SLOT where the image goes (see build_messages);
    the first slot is the image (it is in the first user turn, before any answer text)."""
    text = json.dumps({**fields, "messages": messages}, ensure_ascii=False, separators=(",", ":"))
    if data_uri is None:
        return text.encode("utf-8")
    head, slot, tail = text.partition(_SLOT_JSON)
    if not slot:
        raise ValueError("request body has no image slot")
    return b"".join((head.encode("utf-8"), data_uri.encode("ascii"), tail.encode("utf-8")))


def reask_note(problem: str) -> str:
    return (
        f"Your previous answer could not be used ({problem}). "
        "Answer again with only the requested output, exactly in the required format."
    )


def reask_messages(messages: list[dict[str, Any]], raw: str | None, problem: str) -> list[dict[str, Any]]:
    """Conversation for a re-ask: the original turn, the bad answer, and what was wrong with it."""
    note = reask_note(problem)
    return [*messages, {"role": "assistant", "content": raw or ""}, {"role": "user", "content": note}]


# Tokens of the two extra chat turns' markup (role headers, end markers) besides their text.
REASK_TURN_TOKENS = 24
CUT_MARK = " [...]"


def fit_repeated_answer(
    raw: str | None, usage: dict[str, int], problem: str, max_tokens: int, context_tokens: int | None
) -> str | None:
    """The bad answer as a re-ask may repeat it within the served context, or None: no room for a
    re-ask at all. The re-ask's prompt is this call's prompt plus the answer and the note, and the
    server also reserves `max_tokens` for the new answer; past the context it refuses the request.

    Token counts come from the server's own usage of this call (its tokenizer); the answer's
    characters per token, measured on the answer itself, convert the room left into characters."""
    text = raw or ""
    prompt, answered = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if context_tokens is None or prompt is None:
        return text  # unknown context (not vLLM, or no usage): sent whole, as before
    chars_per_token = max(1.0, len(text) / answered) if answered else 1.0
    note_tokens = int(len(reask_note(problem)) / chars_per_token * 1.1) + REASK_TURN_TOKENS
    room = context_tokens - max_tokens - prompt - note_tokens
    if room <= 0:
        return None
    if answered is not None and answered <= room:
        return text
    keep = int(room * chars_per_token * 0.9) - len(CUT_MARK)
    return text[: max(0, keep)] + CUT_MARK
