"""The five prompt templates of the Lenses supplementary (Sec. 12, Listings 1-5), loaded by name.

A template file (prompts/<name>.txt) has a YAML front matter (listing number, title, role) and a
body with placeholders that are filled from one place each:

    {{lens_definitions}}            prompts/lens_definitions.yaml (shared by all five listings)
    {{lens_definitions:VARIANT}}    the same, with a listing's additions (with_examples, grounded)
    {{phrase_bank:LISTING}}         phrase_bank/phrase_bank.yaml, the sets that listing shows

The rendered text is static (it holds no per-image data), so it is sent before the image and
vLLM can reuse its prefix cache. Its sha256 prefix is the template's version hash, recorded on
every output row (`prompt_hash`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from lenses_data.annotation.phrase_bank import PhraseBank, default_phrase_bank
from lenses_data.resources import resource_dir

# The template that generates each text kind (Listing 2: image-side prompts; Listing 3: captions),
# written here only. Its name also names the phrase-bank listing that governs the kind.
TEMPLATE_OF_KIND: dict[str, str] = {"prompt": "image_side_prompts", "caption": "captions"}
FILTER_TEMPLATE = "filter"  # Listing 1
TEXT_VALIDATION = "text_validation"  # Listing 4
VISUAL_VALIDATION = "visual_validation"  # Listing 5: may "remove or soften" fragments and idioms
TEMPLATE_NAMES: tuple[str, ...] = (
    FILTER_TEMPLATE,
    *TEMPLATE_OF_KIND.values(),
    TEXT_VALIDATION,
    VISUAL_VALIDATION,
)
HASH_CHARS = 16
_PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)(?::([a-z_]+))?\s*\}\}")


class TemplateError(ValueError):
    """A template file is malformed or names an unknown placeholder."""


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    listing: int
    title: str
    role: str
    meta: dict[str, Any]
    text: str  # rendered, ready to send
    hash: str  # version hash of the rendered text

    def __str__(self) -> str:
        return self.text


def prompts_dir() -> Path:
    return resource_dir("prompts")


def split_front_matter(raw: str, origin: str = "<template>") -> tuple[dict[str, Any], str]:
    if not raw.startswith("---\n"):
        raise TemplateError(f"{origin}: missing front matter (a first line '---')")
    head, sep, body = raw[4:].partition("\n---\n")
    if not sep:
        raise TemplateError(f"{origin}: front matter is not closed by '---'")
    meta = yaml.safe_load(head) or {}
    return meta, body


def render_lens_definitions(definitions: dict[str, Any], variant: str | None = None) -> str:
    extra = definitions["variants"][variant] if variant else {}
    if variant and variant not in definitions["variants"]:
        raise TemplateError(f"unknown lens-definition variant {variant!r}")
    lines = []
    for lens in definitions["order"]:
        lines.append(f"- {lens}: {definitions['definitions'][lens]}{extra.get(lens, '')}.")
    return "\n".join(lines)


def render_body(body: str, definitions: dict[str, Any], bank: PhraseBank, origin: str) -> str:
    def fill(match: re.Match[str]) -> str:
        key, argument = match.group(1), match.group(2)
        if key == "lens_definitions":
            return render_lens_definitions(definitions, argument)
        if key == "phrase_bank":
            if argument not in bank.listings:
                raise TemplateError(f"{origin}: phrase_bank needs a listing, one of {sorted(bank.listings)}")
            return bank.render(argument)
        raise TemplateError(f"{origin}: unknown placeholder {match.group(0)!r}")

    text = _PLACEHOLDER.sub(fill, body)
    if "{{" in text:
        raise TemplateError(f"{origin}: unfilled placeholder left in the rendered text")
    return text.strip() + "\n"


def prompt_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:HASH_CHARS]


def load_template(name: str, folder: Path | None = None, bank: PhraseBank | None = None) -> PromptTemplate:
    """Read, render and hash one template by name (e.g. "captions")."""
    folder = folder or prompts_dir()
    path = folder / f"{name}.txt"
    if not path.exists():
        raise TemplateError(f"no prompt template {name!r} in {folder} (known: {', '.join(TEMPLATE_NAMES)})")
    meta, body = split_front_matter(path.read_text(encoding="utf-8"), str(path))
    definitions = yaml.safe_load((folder / "lens_definitions.yaml").read_text(encoding="utf-8"))
    text = render_body(body, definitions, bank or default_phrase_bank(), str(path))
    return PromptTemplate(
        name=name,
        listing=int(meta["listing"]),
        title=str(meta["title"]),
        role=str(meta["role"]),
        meta=meta,
        text=text,
        hash=prompt_hash(text),
    )


@cache
def get_template(name: str) -> PromptTemplate:
    """The shipped template `name`, rendered once per process."""
    return load_template(name)


def all_prompt_hashes() -> dict[str, str]:
    return {name: get_template(name).hash for name in TEMPLATE_NAMES}
