"""The simulator's answers to the pipeline's own requests, modelled on the Lenses paper.

Listings 2-3 (generation) get a JSON array of {Prompt|Caption, Focus, Category} items: per lens
1-3 texts (a lens sometimes left out) with the mean count per lens set so that, after the
simulated rules and validators, an image keeps Table 1's captions per image and lens mix; word
counts follow the published examples (000 Figs. 5-7). Listings 4-5 (validation) echo their
items, discarding some (empty text) and lightly editing others at the configured rates. Rates
and their sources: lenses_data.config.simulator.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import re
from typing import Any

from lenses_data.annotation.prompts import TEMPLATE_OF_KIND
from lenses_data.annotation.rules import words
from lenses_data.config.annotate import IDIOM_REQUIRED_LENSES, LISTING_WORDS
from lenses_data.config.simulator import (
    EXAMPLE_WORDS,
    EXAMPLE_WORDS_SD,
    SimContentSettings,
)
from lenses_data.schemas import LENS_NAMES
from lenses_data.simulator import simtexts as st

TEXT_KEY = {"caption": "Caption", "prompt": "Prompt"}
KIND_OF_LISTING = {template: kind for kind, template in TEMPLATE_OF_KIND.items()}
_VERB_START = re.compile(r"^(pick|walking|swimming|running|burning|move|moving|pay|burn|crying|turning|tipping|"
                         r"break|cut|open|back|the|once|on|wheels|train|garbage|tide|in|under)\b", re.I)  # fmt: skip


@functools.cache
def _listing_heads() -> dict[str, str]:
    """First paragraph of each rendered template: how a request names its listing."""
    from lenses_data.annotation.prompts import TEMPLATE_NAMES, get_template

    return {name: get_template(name).text.split("\n\n")[0].strip() for name in TEMPLATE_NAMES}


def listing_of(texts: list[str]) -> str | None:
    """Which of the project's five templates a request carries (None for any other request)."""
    if not texts:
        return None
    first = texts[0].strip()
    return next((name for name, head in _listing_heads().items() if head and first.startswith(head)), None)


def item_kind(schema: dict[str, Any] | None) -> str | None:
    """'caption' or 'prompt' when the schema is an array of the listings' items."""
    if not schema or schema.get("type") != "array":
        return None
    items = schema.get("items") or {}
    if "$ref" in items:
        items = schema.get("$defs", {}).get(items["$ref"].rsplit("/", 1)[-1], {})
    props = items.get("properties") or {}
    return next((kind for kind, key in TEXT_KEY.items() if key in props and "Category" in props), None)


@functools.cache
def _bank_idioms(listing: str) -> tuple[str, ...]:
    """Bank idioms that read as noun phrases ("a kind of {idiom}")."""
    from lenses_data.annotation.phrase_bank import load_phrase_bank

    bank = load_phrase_bank()
    shown = (i.text for i in bank.idioms_for(listing))
    fits = (t for t in shown if not _VERB_START.match(t) and not re.search(r"[(),]", t))
    return tuple(t for t in fits if bank.find(f"a kind of {t}", listing))  # the bank's matcher agrees


def unit(*parts: object) -> float:
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


# ---------------------------------------------------------------------------------------------
# Generation (Listings 2 and 3)


def survival(cfg: SimContentSettings) -> float:
    """Share of generated texts the simulated rules and text validator let through."""
    return (1 - cfg.text_discard_rate) * (1 - cfg.word_range_miss_rate)


def lens_counts(rng: random.Random, cfg: SimContentSettings) -> dict[str, int]:
    """Texts per lens for one answer: 0 (left out) or 1 + Binomial(2, q), q set by the target mean."""
    counts = {}
    for lens in LENS_NAMES:
        mean = cfg.texts_per_image * cfg.lens_share.get(lens, 0.0) / survival(cfg) / (1 - cfg.lens_omit_rate)
        q = min(1.0, max(0.0, (mean - 1) / 2))
        counts[lens] = 0 if rng.random() < cfg.lens_omit_rate else 1 + (rng.random() < q) + (rng.random() < q)
    return counts


def target_words(rng: random.Random, kind: str, lens: str, cfg: SimContentSettings) -> int:
    low, high = LISTING_WORDS[kind]
    if rng.random() < cfg.word_range_miss_rate:
        return high + rng.randint(1, 2)
    return max(low, min(high, round(rng.gauss(EXAMPLE_WORDS[kind][lens], EXAMPLE_WORDS_SD[kind]))))


class _Writer:
    """Writes the texts of one answer, never reusing a core or an extension within it."""

    def __init__(self, rng: random.Random, scene: st.Scene, kind: str, cfg: SimContentSettings) -> None:
        self.rng, self.scene, self.kind, self.cfg = rng, scene, kind, cfg
        self.used: set[str] = set()

    def item(self, lens: str) -> dict[str, str]:
        """One text; an idiom text is kept only if the bank's matcher reads the idiom as idiomatic
        (a nearby cue word can make it a literal use), else another idiom is tried."""
        from lenses_data.annotation.phrase_bank import default_phrase_bank

        for _ in range(4):
            item = self._item(lens, self._idiom(lens))
            if not item.pop("_idiom") or default_phrase_bank().find(
                item[TEXT_KEY[self.kind]], TEMPLATE_OF_KIND[self.kind]
            ):
                return item
        item = self._item(lens, "")
        item.pop("_idiom")
        return item

    def _item(self, lens: str, idiom: str) -> dict[str, str]:
        cores = st.IDIOM_CORES[lens] if idiom else st.CORES[lens]
        core = self._pick(cores)
        target = target_words(self.rng, self.kind, lens, self.cfg)
        frame = self._frame()
        frame_words = len(words(frame.replace("{Clause}", "").replace("{clause}", "")))
        clause = self._extend(st.fill(core, self.scene, idiom), lens, target - frame_words)
        text = frame.replace("{Clause}", st._cap(clause)).replace("{clause}", clause[:1].lower() + clause[1:])
        return {TEXT_KEY[self.kind]: text, "Focus": self._focus(core), "Category": lens, "_idiom": idiom}

    def _frame(self) -> str:
        """Prompts vary their syntax (Listing 2), each frame once per answer; captions are plain."""
        if self.kind != "prompt":
            return "{Clause}."
        fresh = [f for f in st.PROMPT_FRAMES if f not in self.used]
        frame = self.rng.choice(fresh) if fresh else "{Clause}."
        self.used.add(frame)
        return frame

    def _idiom(self, lens: str) -> str:
        required = lens in IDIOM_REQUIRED_LENSES  # the listings' MUST: Figurative
        rate = self.cfg.figurative_idiom_rate if required else self.cfg.optional_idiom_rate
        if lens not in st.IDIOM_CORES or self.rng.random() >= rate:
            return ""
        return self.rng.choice(_bank_idioms(TEMPLATE_OF_KIND[self.kind]))

    def _pick(self, options: tuple[str, ...]) -> str:
        fresh = [o for o in options if o not in self.used] or list(options)
        choice = self.rng.choice(fresh)
        self.used.add(choice)
        return choice

    def _extend(self, clause: str, lens: str, target: int) -> str:
        low = LISTING_WORDS[self.kind][0]
        count = len(words(clause))
        options = [o for o in st.EXTENSIONS[lens] if o not in self.used]
        self.rng.shuffle(options)
        for option in options:
            extra = st.fill(option, self.scene)
            if count + len(words(extra)) <= target or count < low:
                clause, count = f"{clause}, {extra}", count + len(words(extra))
                self.used.add(option)
        return clause

    def _focus(self, core: str) -> str:
        found = re.search(r"\{(\w+)\}", core)
        slot = found.group(1).lower().replace("mood_adj", "mood_noun") if found else "setting"
        value = str(self.scene.__dict__.get(slot, slot))
        return re.sub(r"^(a|an|the|two)\s+", "", value)


def generate_items(kind: str, image_key: str, identity: str, seed: int, cfg: SimContentSettings) -> str:
    """A Listing 2/3 answer: the scene comes from the image, the choices from the request."""
    scene = st.draw_scene(random.Random(f"{seed}|scene|{image_key}"))
    rng = random.Random(f"{seed}|{identity}|{kind}")
    writer = _Writer(rng, scene, kind, cfg)
    counts = lens_counts(rng, cfg)
    order = [lens for lens in LENS_NAMES if counts[lens]]
    order += [lens for lens in LENS_NAMES for _ in range(counts[lens] - 1)]
    return json.dumps([writer.item(lens) for lens in order], ensure_ascii=False)


# ---------------------------------------------------------------------------------------------
# Validation (Listings 4 and 5)


def validate_items(items: list[Any], kind: str, visual: bool, seed: int, cfg: SimContentSettings) -> str:
    """Echo each item; discard (empty text) or lightly edit some, decided per item text."""
    key = TEXT_KEY[kind]
    discard = cfg.visual_discard_rate if visual else cfg.text_discard_rate
    edit = cfg.visual_edit_rate if visual else cfg.text_edit_rate
    out = []
    for item in items:
        if not isinstance(item, dict):
            continue
        text = str(item.get(key, ""))
        draw = unit(seed, "visual" if visual else "text", text, item.get("Focus"), item.get("Category"))
        if draw < discard:
            text = ""
        elif draw < discard + edit:
            text = edited(text, kind, visual)
        out.append({key: text, "Focus": item.get("Focus", ""), "Category": item.get("Category", "")})
    return json.dumps(out, ensure_ascii=False)


def edited(text: str, kind: str, visual: bool) -> str:
    """Listing 5 softens by removing a trailing fragment; Listing 4 changes a word."""
    head, sep, _ = text.rpartition(", ")
    if visual and sep and len(words(head)) >= LISTING_WORDS[kind][0]:
        return head + text[-1] if text[-1] in ".?" else head
    for word, other in st.SYNONYMS.items():
        swapped = re.sub(rf"\b{word}\b", other, text, count=1)
        if swapped != text:
            return swapped
    return text.replace(", ", " - ", 1)  # a punctuation fix when no word has a listed synonym
