"""Images, API keys and journal keys: what goes on the wire and what the journal is keyed by."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from PIL import Image
from skimage import data as skdata

from lenses_data.config.models import RoleConfig
from lenses_data.models import types as codes
from lenses_data.models.client import ModelClient, ModelRequest
from lenses_data.models.keys import NO_KEY, MissingKeyError, resolve_api_key
from lenses_data.models.messages import build_messages, load_image, request_hash
from lenses_data.models.parsing import parse_choice
from lenses_data.simulator.simulator import create_app
from lenses_data.simulator.testing import sim_models_config, sim_stats
from tests.lenses_data.models.fakeserver import serving


@pytest.fixture
def images(tmp_path: Path) -> list[Path]:
    paths = []
    for name, array in [("astronaut.png", skdata.astronaut()), ("coffee.jpg", skdata.coffee())]:
        path = tmp_path / name
        Image.fromarray(np.asarray(array)).save(path)
        paths.append(path)
    return paths


def test_image_is_sent_as_data_uri_after_the_static_text(images: list[Path]) -> None:
    loaded = load_image(str(images[1]))
    raw = images[1].read_bytes()
    assert loaded.sha256 == hashlib.sha256(raw).hexdigest()
    assert loaded.data_uri.startswith("data:image/jpeg;base64,")
    assert base64.b64decode(loaded.data_uri.split(",", 1)[1]) == raw
    request = ModelRequest(
        key="k",
        role="generator",
        system="sys",
        text="static",
        image_path=str(images[1]),
        after_image_text="dynamic",
    )
    messages = build_messages(request, loaded.data_uri)
    assert messages[0] == {"role": "system", "content": "sys"}
    assert [part["type"] for part in messages[1]["content"]] == ["text", "image_url", "text"]
    assert messages[1]["content"][0]["text"] == "static" and messages[1]["content"][2]["text"] == "dynamic"


def test_journal_key_follows_image_content_not_path(images: list[Path], tmp_path: Path) -> None:
    role = RoleConfig(model="m")
    copy = tmp_path / "copy.png"
    copy.write_bytes(images[0].read_bytes())
    request = ModelRequest(key="k", role="generator", text="t", image_path=str(images[0]))
    same = request_hash(request, role, load_image(str(images[0])).sha256, "structured_outputs")
    moved = request_hash(
        request.model_copy(update={"image_path": str(copy)}),
        role,
        load_image(str(copy)).sha256,
        "structured_outputs",
    )
    other = request_hash(request, role, load_image(str(images[1])).sha256, "structured_outputs")
    hotter = request_hash(
        request,
        role.model_copy(update={"sampling": role.sampling.model_copy(update={"temperature": 0.9})}),
        load_image(str(images[0])).sha256,
        "structured_outputs",
    )
    assert same == moved and len({same, other, hotter}) == 3


def test_images_over_http_and_unreadable_image_is_a_bad_input(
    sim_url: str, images: list[Path], tmp_path: Path
) -> None:
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not an image at all")
    paths = [str(images[0]), str(images[1]), str(broken), str(tmp_path / "missing.png")]
    requests = [
        ModelRequest(
            key=f"i{i}", role="visual_validator", text="Is it grounded?", image_path=p, choice=["YES", "NO"]
        )
        for i, p in enumerate(paths)
    ]
    results = ModelClient(sim_models_config([sim_url])).run_sync(requests, parse_choice(["YES", "NO"]))
    assert [r.ok for r in results] == [True, True, False, False]
    assert [r.error_code for r in results[2:]] == [codes.BAD_INPUT, codes.BAD_INPUT]
    assert sim_stats(sim_url)["total_calls"] == 2  # bad inputs are never sent


def test_api_key_from_env_and_missing_key_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    role = RoleConfig(model="m", api_key_env="LENSES_TEST_KEY")
    monkeypatch.setenv("LENSES_TEST_KEY", "sk-secret-123")
    assert resolve_api_key("filter", role) == "sk-secret-123"
    monkeypatch.delenv("LENSES_TEST_KEY")
    with pytest.raises(MissingKeyError) as info:
        resolve_api_key("filter", role)
    assert "LENSES_TEST_KEY" in str(info.value)
    assert resolve_api_key("filter", RoleConfig(model="m")) == "EMPTY"


def test_key_never_reaches_results_or_journal(
    sim_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LENSES_TEST_KEY", "sk-do-not-leak-42")
    config = sim_models_config([sim_url])
    config = config.model_copy(
        update={"filter": config.filter.model_copy(update={"api_key_env": "LENSES_TEST_KEY"})}
    )
    client = ModelClient.from_config(config, journal_dir=tmp_path / "journal")
    journal_file = tmp_path / "journal" / "filter" / "part-00000.jsonl"
    with client.shard_journal(journal_file):
        results = client.run_sync(
            [ModelRequest(key="a", role="filter", text="?", choice=["YES", "NO"])],
            parse_choice(["YES", "NO"]),
        )
    client.close()
    assert results[0].ok
    assert "sk-do-not-leak-42" not in results[0].model_dump_json()
    assert b'"key": "a"' in journal_file.read_bytes()  # the journal was written, without the API key
    assert b"sk-do-not-leak-42" not in journal_file.read_bytes()


def test_n_choices_parse_each_and_keep_raw_list(sim_url: str) -> None:
    import json

    request = ModelRequest(key="n3", role="filter", text="?", choice=["YES", "NO"], n=3)
    (result,) = ModelClient(sim_models_config([sim_url])).run_sync([request], parse_choice(["YES", "NO"]))
    assert result.ok and len(result.value) == 3 and set(result.value) <= {"YES", "NO"}
    assert json.loads(result.raw) == result.value


def test_identical_requests_in_one_batch_are_sent_once(sim_url: str) -> None:
    same = dict(role="filter", text="Same question?", after_image_text="same item", choice=["YES", "NO"])
    requests = [ModelRequest(key="first", **same), ModelRequest(key="second", **same)]
    results = ModelClient(sim_models_config([sim_url])).run_sync(requests, parse_choice(["YES", "NO"]))
    assert [r.key for r in results] == ["first", "second"]
    assert results[0].value == results[1].value and results[1].cached
    assert sim_stats(sim_url)["total_calls"] == 1


def _recording_authorization(app: Any, seen: list[str]) -> Any:
    """The simulator's ASGI app, noting the Authorization header of every request it receives."""

    async def recorded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.extend(value.decode() for name, value in scope["headers"] if name == b"authorization")
        await app(scope, receive, send)

    return recorded


def test_api_key_from_a_saved_prefect_secret_block_reaches_the_server(prefect_harness: None) -> None:
    from prefect.blocks.system import Secret

    Secret(value="sk-from-block-7").save("lenses-test-vllm-key", overwrite=True)
    role = RoleConfig(model="m", api_key_secret="lenses-test-vllm-key")
    assert resolve_api_key("generator", role) == "sk-from-block-7"
    with pytest.raises(MissingKeyError, match="'lenses-test-missing'"):
        resolve_api_key("generator", RoleConfig(model="m", api_key_secret="lenses-test-missing"))

    # Through the client, which resolves the key off its event loop: the block's value is the bearer.
    seen: list[str] = []
    app = _recording_authorization(create_app(), seen)
    with serving(SimpleNamespace(app=lambda: app)) as url:
        config = sim_models_config([url])
        config = config.model_copy(
            update={"filter": config.filter.model_copy(update={"api_key_secret": "lenses-test-vllm-key"})}
        )
        request = ModelRequest(key="s", role="filter", text="?", choice=["YES", "NO"])
        (result,) = ModelClient(config).run_sync([request], parse_choice(["YES", "NO"]))
    assert result.ok and seen and set(seen) == {"Bearer sk-from-block-7"}


def test_no_secret_configured_never_imports_prefect() -> None:
    code = (
        "import sys; from lenses_data.config.models import RoleConfig;"
        "from lenses_data.models.keys import resolve_api_key;"
        "print(resolve_api_key('filter', RoleConfig(model='m')), 'prefect' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == [NO_KEY, "False"]
