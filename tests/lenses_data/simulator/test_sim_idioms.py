"""Simulated Figurative texts are like the published ones: most carry no phrase-bank idiom (none of
the 12 Figurative examples of supplementary Figs. 5-7 does), some do; Literal and Background never."""

from __future__ import annotations

import json
import math

from lenses_data.annotation.answers import array_schema
from lenses_data.annotation.phrase_bank import load_phrase_bank
from lenses_data.annotation.prompts import get_template
from lenses_data.simulator.simcontent import answer_content
from lenses_data.simulator.simulator import SimConfig

LISTING = {"caption": "captions", "prompt": "image_side_prompts"}


def _answers(kind: str, images: int, config: SimConfig) -> list[dict[str, str]]:
    items = []
    for i in range(images):
        body = {
            "model": "m",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": get_template(LISTING[kind]).text},
                        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,img{i}"}},
                    ],
                }
            ],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "a", "schema": array_schema(kind, 1, 40)},
            },
        }
        items += json.loads(answer_content(body, f"request-{i}", config))
    return items


def test_figurative_idioms_at_the_configured_rate_and_never_in_literal_or_background():
    bank = load_phrase_bank()
    config = SimConfig()
    rate = config.content.figurative_idiom_rate
    for kind in ("caption", "prompt"):
        items = _answers(kind, 200, config)
        text_key = kind.capitalize()
        with_idiom = {lens: [] for lens in ("Literal", "Figurative", "Background")}
        for item in items:
            if item["Category"] in with_idiom:
                with_idiom[item["Category"]].append(bool(bank.find(item[text_key], LISTING[kind])))
        figurative = with_idiom["Figurative"]
        share = sum(figurative) / len(figurative)
        # four binomial standard errors around the configured rate; "most" means below one half
        tolerance = 4 * math.sqrt(rate * (1 - rate) / len(figurative))
        assert abs(share - rate) <= tolerance, (kind, share)
        assert share < 0.5
        assert not any(with_idiom["Literal"]) and not any(with_idiom["Background"])


def test_idiom_rate_is_a_setting():
    config = SimConfig(content={"figurative_idiom_rate": 1.0})
    bank = load_phrase_bank()
    figurative = [i for i in _answers("caption", 40, config) if i["Category"] == "Figurative"]
    assert figurative and all(bank.find(i["Caption"], "captions") for i in figurative)
