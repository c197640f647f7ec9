"""The simulator: schema-valid, deterministic, plausible answers; echo for validation requests;
deterministic faults; marked simulated; 256 requests in flight."""

from __future__ import annotations

import asyncio
import json

import jsonschema
import openai
from pydantic import BaseModel, Field

from lenses_data.models.client import ModelClient, ModelRequest
from lenses_data.models.parsing import parse_choice, parse_model
from lenses_data.models.types import SIMULATOR_FINGERPRINT
from lenses_data.schemas import Lens
from lenses_data.simulator.simulator import SimConfig, SimState, answer_content
from lenses_data.simulator.testing import sim_models_config, sim_stats


class Detail(BaseModel):
    score: int = Field(ge=1, le=5)
    tags: list[str] = Field(min_length=2, max_length=2)


class Caption(BaseModel):
    category: Lens
    caption: str
    focus: str
    idioms: list[str] = Field(default_factory=list, max_length=2)
    detail: Detail
    note: str | None = None


class Answer(BaseModel):
    captions: list[Caption] = Field(min_length=3, max_length=5)


PROMPT = "Describe the lighthouse above the stormy harbour where fishing boats shelter."


def _body(after: str, schema: dict | None = None, choice: list[str] | None = None) -> dict:
    body: dict = {
        "model": "m",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": PROMPT}, {"type": "text", "text": after}]}
        ],
    }
    if schema:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "a", "schema": schema}}
    if choice:
        body["structured_outputs"] = {"choice": choice}
    return body


def test_answers_satisfy_nested_schema_over_http(sim_url: str) -> None:
    schema = Answer.model_json_schema()
    client = ModelClient(sim_models_config([sim_url]))
    requests = [
        ModelRequest(
            key=f"g{i}", role="generator", text=PROMPT, after_image_text=f"image {i}", json_schema=schema
        )
        for i in range(20)
    ]
    results = client.run_sync(requests, parse_model(Answer))
    assert all(r.ok for r in results), [r.error_message for r in results if not r.ok]
    for result in results:
        jsonschema.validate(json.loads(result.raw), schema)
        for caption in result.value.captions:
            words = caption.caption.rstrip(".").split()
            assert 10 <= len(words) <= 20
            assert {"lighthouse", "harbour", "boats", "stormy", "fishing", "shelter"} & {
                w.lower() for w in words
            }
            assert 1 <= len(caption.focus.split()) <= 4


def test_answers_are_deterministic_and_depend_on_the_request() -> None:
    schema = Answer.model_json_schema()
    config = SimConfig(seed=1)
    first = answer_content(_body("image 1", schema), "d1", config)
    assert first == answer_content(_body("image 1", schema), "d1", config)
    assert first != answer_content(_body("image 2", schema), "d2", config)


def test_validation_requests_echo_their_items() -> None:
    class Verdict(BaseModel):
        text_id: str
        action: str = Field(json_schema_extra={"enum": ["keep", "edit", "discard"]})
        text: str

    class Verdicts(BaseModel):
        results: list[Verdict]

    items = [{"text_id": f"t{i}", "text": f"A caption number {i} about boats."} for i in range(4)]
    content = answer_content(_body(json.dumps(items), Verdicts.model_json_schema()), "v", SimConfig())
    parsed = Verdicts.model_validate_json(content)
    assert [v.text_id for v in parsed.results] == ["t0", "t1", "t2", "t3"]
    assert [v.text for v in parsed.results] == [item["text"] for item in items]
    assert {v.action for v in parsed.results} <= {"keep", "edit", "discard"}


def test_yes_rate_and_choice_determinism() -> None:
    config = SimConfig(yes_rate=0.3, seed=2)
    answers = [answer_content(_body(str(i), choice=["YES", "NO"]), f"h{i}", config) for i in range(400)]
    assert set(answers) == {"YES", "NO"}
    assert 0.2 <= answers.count("YES") / len(answers) <= 0.4
    assert answers == [
        answer_content(_body(str(i), choice=["YES", "NO"]), f"h{i}", config) for i in range(400)
    ]


def test_faults_are_deterministic_per_hash_and_attempt() -> None:
    state = SimState(SimConfig(seed=4, faults={"http_500": 0.3, "empty": 0.2}))
    again = SimState(SimConfig(seed=4, faults={"http_500": 0.3, "empty": 0.2}))
    other_seed = SimState(SimConfig(seed=5, faults={"http_500": 0.3, "empty": 0.2}))
    plan = [state.fault_for(f"h{i}", a) for i in range(300) for a in range(3)]
    assert plan == [again.fault_for(f"h{i}", a) for i in range(300) for a in range(3)]
    assert plan != [other_seed.fault_for(f"h{i}", a) for i in range(300) for a in range(3)]
    assert 0.4 <= sum(p is not None for p in plan) / len(plan) <= 0.6
    capped = SimState(SimConfig(faults={"http_500": 1.0}, faults_until_attempt=2))
    assert [capped.fault_for("x", a) for a in range(4)] == ["http_500", "http_500", None, None]


def test_raw_openai_response_is_marked_simulated(sim_url: str) -> None:
    async def ask() -> openai.types.chat.ChatCompletion:
        async with openai.AsyncOpenAI(base_url=sim_url, api_key="x", max_retries=0) as client:
            return await client.chat.completions.create(
                model="OpenGVLab/InternVL3_5-38B",
                messages=[{"role": "user", "content": "YES or NO?"}],
                extra_body={"structured_outputs": {"choice": ["YES", "NO"]}},
            )

    completion = asyncio.run(ask())
    assert completion.system_fingerprint == SIMULATOR_FINGERPRINT
    assert completion.model == "simulated/OpenGVLab/InternVL3_5-38B"
    assert completion.choices[0].message.content in ("YES", "NO")


def test_serves_256_requests_in_flight(simulator) -> None:
    # The server holds every answer until 256 are in flight at once (or 20 s pass): if the client
    # could not keep 256 in flight, the peak stays below 256.
    with simulator(hold_until_in_flight=256) as url:
        client = ModelClient(sim_models_config([url], timeout_s=30, concurrency=256))
        requests = [
            ModelRequest(key=f"c{i}", role="filter", text="?", after_image_text=str(i), choice=["YES", "NO"])
            for i in range(256)
        ]
        results = client.run_sync(requests, parse_choice(["YES", "NO"]))
        stats = sim_stats(url)
    assert all(r.ok for r in results)
    assert stats["max_in_flight"] == 256


def test_listing_answers_follow_the_request_identity(sim_url: str) -> None:
    # A re-ask (the bad answer and a correction appended) is the same item: same answer. Another image
    # is another scene, and every text of one image (captions and prompts alike) describes that scene.
    from lenses_data.annotation.answers import array_schema
    from lenses_data.annotation.prompts import get_template

    def ask(template: str, kind: str, image: str, reask: bool = False) -> str:
        content = [
            {"type": "text", "text": get_template(template).text},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
        ]
        messages = [{"role": "user", "content": content}]
        if reask:
            messages += [{"role": "assistant", "content": "[]"}, {"role": "user", "content": "Again."}]

        async def call() -> str:
            async with openai.AsyncOpenAI(base_url=sim_url, api_key="x", max_retries=0) as client:
                schema = {
                    "type": "json_schema",
                    "json_schema": {"name": "a", "schema": array_schema(kind, 1, 40)},
                }
                done = await client.chat.completions.create(
                    model="m", messages=messages, extra_body={"response_format": schema}
                )
                return done.choices[0].message.content

        return asyncio.run(call())

    first = ask("captions", "caption", "AAAA")
    assert ask("captions", "caption", "AAAA", reask=True) == first
    assert ask("captions", "caption", "BBBB") != first
    focus = {i["Focus"] for i in json.loads(first)}
    assert focus & {p["Focus"] for p in json.loads(ask("image_side_prompts", "prompt", "AAAA"))}


def test_every_dry_run_setting_reaches_the_server_and_is_declared_once() -> None:
    # SimConfig is the `simulator` section plus test-only knobs: a setting added to the section
    # reaches the server without being written twice (issue 34, "each fact once").
    from lenses_data.config.simulator import SimContentSettings, SimulatorSettings

    assert issubclass(SimConfig, SimulatorSettings)
    assert not set(SimConfig.__annotations__) & set(SimulatorSettings.model_fields)
    settings = SimulatorSettings(
        yes_rate=0.85, seed=7, latency_s=0.01, replicas=2, prefill_tps=300.0, decode_tps=900.0,
        content=SimContentSettings(text_discard_rate=0.2),
    )  # fmt: skip
    config = SimConfig.from_settings(settings)
    assert config.model_dump(include=set(SimulatorSettings.model_fields)) == settings.model_dump()
