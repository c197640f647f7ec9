"""Training pairs for the tiny models: the pipeline's own prompts answered by the project's simulator.

The simulator (`lenses simulate`, a subprocess) answers the four model roles the way the pipeline
expects (YES/NO; JSON arrays of {Prompt|Caption, Focus, Category} items; validators echo and edit
their items). The requests are built here from the shipped prompt templates (lenses_data.prompts)
and the answer schemas (lenses_data.answers), with real photographs from scikit-image as the
images; no model client internals are used. Answers are stored as compact JSON, the shape a small
model learns fastest and the parsers accept.
"""

from __future__ import annotations

import base64
import json
import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from lenses_data.annotation.answers import (
    FILTER_CHOICES,
    array_schema,
    items_json,
    parse_filter_answer,
    parse_items,
)
from lenses_data.annotation.prompts import get_template

ROLE_TEMPLATE = {
    "filter": "filter",
    "validator": "text_validation",
    "visual_validator": "visual_validation",
}
KIND_TEMPLATE = {"prompt": "image_side_prompts", "caption": "captions"}
# scikit-image photographs that ship inside the wheel (no download).
PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "camera", "coins", "moon", "horse", "clock", "page")
MAX_TARGET_ITEMS = 4  # answers are cut to this many items: short targets, short answers at test time
TARGET_WORDS = 6  # and their texts to this many words: a tiny model learns to close its strings


@dataclass(frozen=True)
class Example:
    """One training pair: a role's request (instructions, optional image and items) and its answer."""

    role: str
    instructions: str
    answer: str
    image: str | None = None
    items: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def photo(name: str) -> np.ndarray:
    """An RGB uint8 array of one of scikit-image's bundled photographs."""
    import skimage.data

    image = getattr(skimage.data, name)()
    if image.ndim == 2:
        image = np.stack([image] * 3, axis=-1)
    return np.ascontiguousarray(image[..., :3]).astype(np.uint8)


def write_images(folder: Path, count: int, seed: int = 0) -> list[Path]:
    """`count` JPEGs: crops of the bundled photographs in varied aspect ratios (wide, tall, square)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    paths = []
    for index in range(count):
        base = photo(PHOTOS[index % len(PHOTOS)])
        height, width = base.shape[:2]
        crop_h = rng.randint(height // 3, height)
        crop_w = rng.randint(width // 3, width)
        top, left = rng.randint(0, height - crop_h), rng.randint(0, width - crop_w)
        image = Image.fromarray(base[top : top + crop_h, left : left + crop_w])
        path = folder / f"img-{index:03d}.jpg"
        image.save(path, format="JPEG", quality=85)
        paths.append(path)
    return paths


def data_uri(path: Path) -> str:
    return "data:image/jpeg;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def _content(instructions: str, image: Path | None, items: str | None) -> str | list[dict[str, Any]]:
    if image is None:
        return "\n\n".join(t for t in (instructions, items) if t)
    parts: list[dict[str, Any]] = [{"type": "text", "text": instructions}]
    parts.append({"type": "image_url", "image_url": {"url": data_uri(image)}})
    if items:
        parts.append({"type": "text", "text": items})
    return parts


class Simulator:
    """A client of one `lenses simulate` server."""

    def __init__(self, base_url: str) -> None:
        self.client = httpx.Client(base_url=base_url, timeout=60)

    def ask(self, instructions: str, image: Path | None, items: str | None, **fields: Any) -> str:
        body = {
            "model": "tiny",
            "messages": [{"role": "user", "content": _content(instructions, image, items)}],
            **fields,
        }
        response = self.client.post("/chat/completions", json=body)
        response.raise_for_status()
        return response.json()["choices"][0]["message"]["content"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def simulator(seed: int = 0) -> Iterator[Simulator]:
    """The project's simulator in a subprocess (`lenses simulate`), YES and NO equally likely."""
    port = free_port()
    command = [sys.executable, "-m", "lenses_app.cli", "simulate", "--port", str(port), "--seed", str(seed)]
    process = subprocess.Popen(
        [*command, "--yes-rate", "0.5"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_ready(base, process)
        yield Simulator(f"{base}/v1")
    finally:
        process.terminate()
        process.wait(timeout=30)


def _wait_ready(base: str, process: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"lenses simulate exited: {process.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(f"{base}/v1/models", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise RuntimeError("lenses simulate did not answer within 60 s")


def shortened(items: list[dict[str, str]]) -> list[dict[str, str]]:
    """Items with their Prompt/Caption cut to TARGET_WORDS words (same keys, order and count)."""
    out = []
    for item in items:
        key = "Prompt" if "Prompt" in item else "Caption"
        out.append({**item, key: " ".join(item[key].split()[:TARGET_WORDS]).rstrip(",;:") + "."})
    return out


def _schema_fields(schema: dict[str, Any]) -> dict[str, Any]:
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}}


def _rows(items: list[dict[str, str]], kind: str) -> list[dict[str, str]]:
    key = "Prompt" if kind == "prompt" else "Caption"
    return [{"text": i[key], "focus": i["Focus"], "lens": i["Category"]} for i in items]


def image_examples(sim: Simulator, image: Path, rng: random.Random) -> list[Example]:
    """Listings 1, 2, 3, 4 and 5 for one image (the validators check the generated texts).

    Examples name their image relative to the corpus folder (`images/<file>`)."""
    filter_text = get_template("filter").text
    answer = sim.ask(filter_text, image, None, structured_outputs={"choice": list(FILTER_CHOICES)})
    name = f"images/{image.name}"
    out = [Example("filter", filter_text, parse_filter_answer(answer), image=name)]
    for kind, template in KIND_TEMPLATE.items():
        text = get_template(template).text
        raw = sim.ask(
            text, image, None, seed=rng.randint(0, 999), **_schema_fields(array_schema(kind, 1, 40))
        )
        items = parse_items(raw, kind, 1, 40)[: rng.randint(1, MAX_TARGET_ITEMS)]
        out.append(Example("generator", text, compact(shortened(items)), image=name))
        out += validator_examples(sim, image, kind, items)
    return out


def validator_examples(sim: Simulator, image: Path, kind: str, items: list[dict[str, str]]) -> list[Example]:
    """Listing 4 (text only) and Listing 5 (with the image) on the same batch of items."""
    batch = items_json(kind, _rows(items, kind))
    schema = _schema_fields(array_schema(kind, len(items), len(items)))
    out = []
    for role, with_image in (("validator", False), ("visual_validator", True)):
        text = get_template(ROLE_TEMPLATE[role]).text
        raw = sim.ask(text, image if with_image else None, batch, **schema)
        answer = compact(shortened(parse_items(raw, kind, len(items), len(items))))
        name = f"images/{image.name}" if with_image else None
        out.append(Example(role, text, answer, image=name, items=batch))
    return out


def build_corpus(folder: Path, images: int = 30, seed: int = 0) -> list[Example]:
    """Write `folder/images/*.jpg` and `folder/examples.jsonl`; return the examples."""
    paths = write_images(folder / "images", images, seed)
    rng = random.Random(seed)
    examples: list[Example] = []
    with simulator(seed) as sim:
        for path in paths:
            examples += image_examples(sim, path, rng)
    lines = "".join(e.to_json() + "\n" for e in examples)
    (folder / "examples.jsonl").write_text(lines, encoding="utf-8")
    return examples


def load_corpus(folder: Path) -> list[Example]:
    """The examples of a corpus folder, image paths made absolute."""
    lines = (folder / "examples.jsonl").read_text(encoding="utf-8").splitlines()
    examples = [Example(**json.loads(line)) for line in lines if line.strip()]
    return [replace(e, image=str(folder / e.image)) if e.image else e for e in examples]


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/tiny-corpus")
    started = time.monotonic()
    found = build_corpus(target)
    roles = {role: sum(e.role == role for e in found) for role in sorted({e.role for e in found})}
    print(f"{len(found)} examples {roles} in {time.monotonic() - started:.1f}s -> {target}", file=sys.stderr)
