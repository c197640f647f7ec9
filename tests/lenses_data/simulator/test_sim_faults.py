"""Server faults of the simulator, seen through the `openai` client over real HTTP: each is what a
real OpenAI-compatible server does to this pipeline's requests, and each is off by default."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest

from lenses_data.annotation.answers import array_schema
from lenses_data.annotation.prompts import get_template
from lenses_data.simulator.testing import sim_stats

IMAGE = "data:image/png;base64,iVBORw0KGgo="
SCHEMA_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "captions", "schema": array_schema("caption", 1, 40)},
}


def _ask(url: str, content: Any, **extra_body: Any) -> Any:
    async def call() -> Any:
        async with openai.AsyncOpenAI(base_url=url, api_key="x", max_retries=0) as client:
            return await client.chat.completions.create(
                model="OpenGVLab/InternVL3_5-38B",
                messages=[{"role": "user", "content": content}],
                extra_body=extra_body or None,
            )

    return asyncio.run(call())


def _captions_content() -> list[dict[str, Any]]:
    return [
        {"type": "text", "text": get_template("captions").text},
        {"type": "image_url", "image_url": {"url": IMAGE}},
    ]


def test_reject_json_schema_fails_schema_requests_on_every_attempt(simulator):
    with simulator(server_faults={"reject_json_schema": True}) as url:
        for _ in range(3):
            with pytest.raises(openai.InternalServerError):
                _ask(url, _captions_content(), response_format=SCHEMA_FORMAT)
        # the same listing without a schema is answered as the model would: the JSON array it asks for
        items = json.loads(_ask(url, _captions_content()).choices[0].message.content)
        assert {i["Category"] for i in items} <= {
            "Literal",
            "Figurative",
            "Abstract",
            "Background",
            "Emotional",
        }
        assert sim_stats(url)["server_faults"] == {"reject_json_schema": 3}


def test_ignore_choice_answers_free_text(simulator):
    content = [
        {"type": "text", "text": get_template("filter").text},
        {"type": "image_url", "image_url": {"url": IMAGE}},
    ]
    with simulator(yes_rate=0.5) as url:
        honoured = [
            _ask(
                url,
                [*content, {"type": "text", "text": str(i)}],
                structured_outputs={"choice": ["YES", "NO"]},
            )
            for i in range(6)
        ]
    with simulator(yes_rate=0.5, server_faults={"ignore_choice": True}) as url:
        ignored = [
            _ask(
                url,
                [*content, {"type": "text", "text": str(i)}],
                structured_outputs={"choice": ["YES", "NO"]},
            )
            for i in range(6)
        ]
    assert all(c.choices[0].message.content in ("YES", "NO") for c in honoured)
    for plain, free in zip(honoured, ignored, strict=True):
        text = free.choices[0].message.content
        assert text not in ("YES", "NO") and len(text.split()) > 3
        assert text.split(",")[0].upper() == plain.choices[0].message.content  # same decision, in prose


def test_reject_images_fails_image_requests_only(simulator):
    with simulator(server_faults={"reject_images": True}) as url:
        with pytest.raises(openai.InternalServerError) as error:
            _ask(url, _captions_content(), response_format=SCHEMA_FORMAT)
        assert "image" in str(error.value)
        text_only = _ask(url, "YES or NO?", structured_outputs={"choice": ["YES", "NO"]})
        assert text_only.choices[0].message.content in ("YES", "NO")


def test_truncate_json_cuts_json_answers_with_finish_reason_length(simulator):
    with simulator(server_faults={"truncate_json": 1.0}) as url:
        first = _ask(url, _captions_content(), response_format=SCHEMA_FORMAT).choices[0]
        again = _ask(url, _captions_content(), response_format=SCHEMA_FORMAT).choices[0]
        choice = _ask(url, "YES or NO?", structured_outputs={"choice": ["YES", "NO"]}).choices[0]
    assert first.finish_reason == "length"
    with pytest.raises(json.JSONDecodeError):
        json.loads(first.message.content)
    assert again.message.content == first.message.content  # a max_tokens cut repeats on retry
    assert choice.finish_reason == "stop" and choice.message.content in ("YES", "NO")


def test_server_faults_are_off_by_default(sim_url):
    answer = _ask(sim_url, _captions_content(), response_format=SCHEMA_FORMAT).choices[0]
    assert answer.finish_reason == "stop"
    assert json.loads(answer.message.content)
    assert sim_stats(sim_url)["server_faults"] == {}
