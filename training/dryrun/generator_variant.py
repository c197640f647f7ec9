"""A second export of the same images whose captions and/or prompts another generator "wrote",
for tests and dry runs of the generator-swap and backbone-scaling tables without a second build.

The texts are the simulator's generator answers (`lenses_data.simulator.simlenses.generate_items`,
the same content code `lenses run --simulate` serves) keyed by the generator's model name and the
image: another name gives other texts about the same simulated scene. Unlike a real second
build (`lenses run` with `models.generator.model` set, docs/evaluation.md), the rule and
validation stages are not run on them, and the simulator's scene is drawn from the image id,
not from the image's pixels. The images table is copied unchanged, so image ids and splits match.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from lenses_data.schemas import LENS_NAMES, SPLIT_NAMES

PARTS = {"captions": "caption", "prompts": "prompt"}


def _rows(kind: str, image_id: str, split: str, model: str, seed: int) -> list[dict]:
    from lenses_data.config.simulator import SimContentSettings
    from lenses_data.simulator.simlenses import TEXT_KEY, generate_items

    items = json.loads(generate_items(kind, image_id, f"{model}|{image_id}", seed, SimContentSettings()))
    rows = []
    for item in items:
        text, lens = item[TEXT_KEY[kind]], item["Category"]
        tid = hashlib.sha256(f"{image_id}|{kind}|{lens}|{model}|{text}".encode()).hexdigest()[:16]
        rows.append(
            {"text_id": tid, "image_id": image_id, "split": split, "lens": lens, "text": text,
             "focus": item.get("Focus", ""), "idioms": [], "edited": False, "original_text": None,
             "prompt_hash": "generator-variant", "model": f"simulated/{model}", "simulated": True}
        )  # fmt: skip
    return rows


def write_generator_variant(
    base_export: str | Path, out_dir: str | Path, model: str, parts: Sequence[str], seed: int = 0
) -> Path:
    """Copy base_export to out_dir with `parts` ("captions", "prompts") rewritten as `model`'s."""
    unknown = set(parts) - set(PARTS)
    if unknown or not parts:
        raise ValueError(f"parts must be a non-empty subset of {sorted(PARTS)}, got {list(parts)}")
    base, out = Path(base_export), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    images = pd.read_parquet(base / "images.parquet")
    shutil.copyfile(base / "images.parquet", out / "images.parquet")
    for name, kind in PARTS.items():
        if name not in parts:
            shutil.copyfile(base / f"{name}.parquet", out / f"{name}.parquet")
            continue
        rows = [
            r for i in images.itertuples() for r in _rows(kind, str(i.image_id), str(i.split), model, seed)
        ]
        df = pd.DataFrame(rows)
        df["split"] = pd.Categorical(df["split"], categories=list(SPLIT_NAMES))
        df["lens"] = pd.Categorical(df["lens"], categories=list(LENS_NAMES))
        df.to_parquet(out / f"{name}.parquet", index=False)
    return out
