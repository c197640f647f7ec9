"""Deterministic, schema-valid, plausible answers for the simulator, derived from the request.

Values satisfy the JSON schema (types, enums, const, min/max items and lengths, nested objects,
$ref/$defs, anyOf). Text fields get 10-20 word sentences that mention content words of the
request; validation-style requests (a JSON list of items in the prompt) get their items echoed.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import time
from typing import Any

from lenses_data.annotation.prompts import FILTER_TEMPLATE, TEXT_VALIDATION, VISUAL_VALIDATION
from lenses_data.models.parsing import extract_json
from lenses_data.models.types import SIMULATED_MODEL_PREFIX, SIMULATOR_FINGERPRINT, AnswerError
from lenses_data.schemas import LENS_NAMES
from lenses_data.simulator import simlenses

_STOP = set(
    "about above after again against all also among and any are because been before being below between "
    "both but can could does doing down during each either every few for from further have having here "
    "into just like more most must only other over same should some such than that their them then "
    "there these they this those through under until very what when where which while whose with would "
    "your answer image images return output json valid exactly following given each lens lenses format "
    "field fields object array items words sentence sentences caption captions prompt prompts text describe "
    "write item candidate provide return list generate please using based does support readings idiom "
    "idioms phrase bank natural five literal figurative abstract background emotional category focus".split()
)
_OPENERS = ("In this view,", "Here", "Across the frame,", "At first glance,", "Quietly,", "Beneath it all,")
_FILLER = (
    "the light settles softly over",
    "a quiet mood gathers around",
    "the composition draws the eye toward",
    "soft colours linger near",
    "a sense of stillness surrounds",
    "the scene hints at a story about",
    "shadows and texture frame",
    "the moment feels suspended above",
)
_FUNCTION_WORDS = {"the", "and", "a", "over", "near", "around", "toward", "about", "above", "at", "of", "in"}
_TEXT_FIELDS = re.compile(r"caption|prompt|text|sentence|description|rewrite|revised|edited|statement", re.I)
_REASON_FIELDS = re.compile(r"reason|explanation|rationale|comment|note|why", re.I)
_IDIOMS = ("a silver lining", "the calm before the storm", "a world of its own", "time stands still")


def content_words(texts: list[str], limit: int = 40) -> list[str]:
    words = re.findall(r"[A-Za-z][a-z]{3,}", " ".join(texts))
    seen: dict[str, None] = {}
    for word in words:
        lower = word.lower()
        if lower not in _STOP:
            seen.setdefault(lower, None)
    return list(seen)[:limit] or ["scene", "light", "colour"]


def sentence(rng: random.Random, words: list[str], low: int = 10, high: int = 20) -> str:
    """A sentence of low..high words that mentions up to three content words (the first early)."""
    target = rng.randint(low, high)
    picks = rng.sample(words, k=min(3, len(words)))
    tokens = f"{rng.choice(_OPENERS)} the {picks[0]}".split()
    for word in picks[1:]:
        tokens += f"{rng.choice(_FILLER)} the {word}".split()
    while len(tokens) < target:
        tokens += f"and {rng.choice(_FILLER)} the {rng.choice(words)}".split()
    tokens = tokens[:target]
    if tokens[-1].lower().strip(",") in _FUNCTION_WORDS:
        tokens[-1] = rng.choice(picks)
    text = " ".join(tokens).rstrip(",")
    return text[0].upper() + text[1:] + "."


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    seen = 0
    while "$ref" in schema and seen < 32:
        path = schema["$ref"].lstrip("#/").split("/")
        node: Any = root
        for part in path:
            node = node[part]
        schema = {**node, **{k: v for k, v in schema.items() if k != "$ref"}}
        seen += 1
    return schema


class SchemaFaker:
    def __init__(self, rng: random.Random, words: list[str], root: dict[str, Any]) -> None:
        self.rng, self.words, self.root = rng, words, root

    def value(self, schema: dict[str, Any], name: str = "", echo: Any = None) -> Any:
        schema = _resolve(schema, self.root)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            return echo if echo in schema["enum"] else self.rng.choice(schema["enum"])
        for key in ("anyOf", "oneOf"):
            if key in schema:
                options = [o for o in schema[key] if _resolve(o, self.root).get("type") != "null"] or schema[
                    key
                ]
                return self.value(options[0], name, echo)
        if "allOf" in schema and len(schema["allOf"]) == 1:
            return self.value(schema["allOf"][0], name, echo)
        kind = schema.get("type", "object" if "properties" in schema else "string")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "string")
        maker = getattr(self, f"_{kind}", self._string)
        return maker(schema, name, echo)

    def _object(self, schema: dict[str, Any], name: str, echo: Any) -> dict[str, Any]:
        echo = echo if isinstance(echo, dict) else {}
        props = schema.get("properties", {})
        obj = {key: self.value(sub, key, echo.get(key)) for key, sub in props.items()}
        return obj

    def _array(self, schema: dict[str, Any], name: str, echo: Any) -> list[Any]:
        low = int(schema.get("minItems", 0 if "idiom" in name.lower() else 1))
        default_high = len(echo) if isinstance(echo, list) else 3
        high = int(schema.get("maxItems", max(low, default_high)))
        count = len(echo) if isinstance(echo, list) else self.rng.randint(low, max(low, min(high, low + 2)))
        count = max(low, min(high, count))
        items = schema.get("items", {"type": "string"})
        echoes = echo if isinstance(echo, list) else []
        if "idiom" in name.lower() and _resolve(items, self.root).get("type") == "string":
            return [self.rng.choice(_IDIOMS) for _ in range(count)]
        return [self.value(items, name, echoes[i] if i < len(echoes) else None) for i in range(count)]

    def _string(self, schema: dict[str, Any], name: str, echo: Any) -> str:
        if isinstance(echo, str):
            text = echo
        elif name.lower() in ("category", "lens"):
            text = self.rng.choice(LENS_NAMES)
        elif "focus" in name.lower():
            text = " ".join(self.rng.sample(self.words, k=min(2, len(self.words))))
        elif _TEXT_FIELDS.search(name):
            text = sentence(self.rng, self.words)
        elif _REASON_FIELDS.search(name):
            text = sentence(self.rng, self.words, 6, 12)
        elif name.lower().endswith("id"):
            text = f"{self.rng.getrandbits(64):016x}"
        else:
            text = " ".join(self.rng.sample(self.words, k=min(3, len(self.words))))
        low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
        if high is not None:
            text = text[: int(high)]
        return text + "x" * max(0, low - len(text))

    def _integer(self, schema: dict[str, Any], name: str, echo: Any) -> int:
        if isinstance(echo, int) and not isinstance(echo, bool):
            return echo
        low = int(schema.get("minimum", 0))
        return self.rng.randint(low, int(schema.get("maximum", low + 5)))

    def _number(self, schema: dict[str, Any], name: str, echo: Any) -> float:
        low = float(schema.get("minimum", 0.0))
        return round(self.rng.uniform(low, float(schema.get("maximum", low + 1.0))), 3)

    def _boolean(self, schema: dict[str, Any], name: str, echo: Any) -> bool:
        return echo if isinstance(echo, bool) else self.rng.random() < 0.8

    def _null(self, schema: dict[str, Any], name: str, echo: Any) -> None:
        return None


def input_items(texts: list[str]) -> Any:
    """The JSON items a validation-style prompt carries (last text part first), or None."""
    for text in reversed(texts):
        if "{" not in text and "[" not in text:
            continue
        try:
            return extract_json(text)
        except AnswerError:
            continue
    return None


def _align_echo(schema: dict[str, Any], root: dict[str, Any], items: Any) -> Any:
    """Shape the input items like the answer: a list for an array answer, or the object's one list."""
    schema = _resolve(schema, root)
    if isinstance(items, dict) and schema.get("type") == "array":
        lists = [v for v in items.values() if isinstance(v, list)]
        return lists[0] if lists else [items]
    if isinstance(items, list) and schema.get("type", "object") == "object":
        props = schema.get("properties", {})
        list_keys = [k for k, v in props.items() if _resolve(v, root).get("type") == "array"]
        return {list_keys[0]: items} if list_keys else None
    return items


def schema_answer(schema: dict[str, Any], texts: list[str], rng: random.Random) -> str:
    faker = SchemaFaker(rng, content_words(texts), schema)
    echo = _align_echo(schema, schema, input_items(texts[1:] if len(texts) > 1 else []))
    return json.dumps(faker.value(schema, "", echo), ensure_ascii=False)


def choice_answer(choices: list[str], unit: float, yes_rate: float) -> str:
    upper = [c.upper() for c in choices]
    if "YES" in upper and "NO" in upper:
        return choices[upper.index("YES")] if unit < yes_rate else choices[upper.index("NO")]
    return choices[int(unit * len(choices)) % len(choices)]


# ---------------------------------------------------------------------------------------------
# Reading a chat-completions request body and writing the response body


def request_texts(body: dict[str, Any]) -> tuple[list[str], bool]:
    """Text parts of the first user turn (paragraphs, in order) and whether it carries an image."""
    texts: list[str] = []
    has_image = False
    for message in body.get("messages", []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            texts += [p for p in content.split("\n\n") if p.strip()]
        else:
            for part in content or []:
                if part.get("type") == "text":
                    texts.append(part.get("text", ""))
                has_image = has_image or part.get("type") == "image_url"
        break
    return texts, has_image


def request_choices(body: dict[str, Any]) -> list[str] | None:
    structured = body.get("structured_outputs") or {}
    return structured.get("choice") or body.get("guided_choice")


def request_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    fmt = body.get("response_format") or {}
    if fmt.get("type") == "json_schema":
        return (fmt.get("json_schema") or {}).get("schema")
    structured = body.get("structured_outputs") or {}
    return structured.get("json") or body.get("guided_json")


def completion_payload(body: dict[str, Any], contents: list[tuple[str, str]]) -> dict[str, Any]:
    words = sum(len(c.split()) for c, _ in contents)
    prompt_words = sum(len(t.split()) for t in request_texts(body)[0])
    return {
        "id": f"chatcmpl-sim-{hashlib.sha256(json.dumps(contents).encode()).hexdigest()[:16]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": SIMULATED_MODEL_PREFIX + str(body.get("model", "unknown")),
        "system_fingerprint": SIMULATOR_FINGERPRINT,
        "choices": [
            {"index": i, "message": {"role": "assistant", "content": c}, "finish_reason": f, "logprobs": None}
            for i, (c, f) in enumerate(contents)
        ],
        "usage": {
            "prompt_tokens": prompt_words,
            "completion_tokens": words,
            "total_tokens": prompt_words + words,
        },
    }


# ---------------------------------------------------------------------------------------------
# Choosing the answer


def image_key(body: dict[str, Any]) -> str:
    """Content hash of the first user turn's image (all texts of one image share a scene), or ''."""
    for message in body.get("messages", []):
        if message.get("role") == "user" and isinstance(message.get("content"), list):
            for part in message["content"]:
                if part.get("type") == "image_url":
                    url = str((part.get("image_url") or {}).get("url", ""))
                    return hashlib.sha256(url.encode()).hexdigest()
            break
    return ""


def answer_content(body: dict[str, Any], identity: str, config: Any, index: int = 0) -> str:
    """The (fault-free) answer: a choice; the pipeline's listings answered as the paper's models
    answer them (simlenses); any other schema filled in; else a sentence."""
    texts, has_image = request_texts(body)
    rng = random.Random(f"{config.seed}|{identity}|{index}")
    choices = request_choices(body)
    listing = simlenses.listing_of(texts)
    if choices or listing == FILTER_TEMPLATE:
        answer = choice_answer(
            choices or ["YES", "NO"], _unit(config.seed, "choice", identity, index), config.yes_rate
        )
        ignored = choices and config.server_faults.ignore_choice
        return free_text_choice(answer, rng) if ignored else answer
    schema = request_schema(body)
    kind = simlenses.item_kind(schema) or simlenses.KIND_OF_LISTING.get(listing or "")
    items = input_items(texts[1:]) if len(texts) > 1 else None
    if listing in (TEXT_VALIDATION, VISUAL_VALIDATION) or (kind and isinstance(items, list)):
        kind = kind or _kind_of_items(items)
        visual = listing == VISUAL_VALIDATION or (listing is None and has_image)
        answer = simlenses.validate_items(items or [], kind, visual, config.seed, config.content)
        garble = config.server_faults.garble_validator_focus and not visual
        return _garbled_focus(answer) if garble else answer
    if kind:
        key = image_key(body) or hashlib.sha256("|".join(texts).encode()).hexdigest()
        return simlenses.generate_items(kind, key, f"{identity}|{index}", config.seed, config.content)
    if schema:
        return schema_answer(schema, texts, rng)
    return sentence(rng, content_words(texts))


def _garbled_focus(answer: str) -> str:
    """A Listing 4 answer whose every fixed Focus field was rewritten (SimServerFaults)."""
    items = json.loads(answer)
    for item in items:
        item["Focus"] = f"{item.get('Focus', '')} (rephrased)".strip()
    return json.dumps(items, ensure_ascii=False)


def _kind_of_items(items: Any) -> str:
    first = items[0] if isinstance(items, list) and items and isinstance(items[0], dict) else {}
    return "prompt" if "Prompt" in first else "caption"


def free_text_choice(answer: str, rng: random.Random) -> str:
    """What a model says when the server ignores the choice constraint: a sentence, not a token."""
    reasons = ("several non-literal readings fit the scene", "the scene invites more than one reading")
    if answer.upper() == "NO":
        reasons = ("the scene reads mostly literally", "nothing beyond the literal stands out")
    word = answer.capitalize() if answer.upper() in ("YES", "NO") else answer
    return f"{word}, {rng.choice(reasons)}."


def _unit(*parts: object) -> float:
    return simlenses.unit(*parts)
