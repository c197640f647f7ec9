"""A small export-format folder built from scikit-image sample images, for tests and dry runs.

Captions and prompts are templated per lens around a per-image subject, so a tiny model can
learn to match them. Tables follow the export layout (docs/export.md): images.parquet,
captions.parquet, prompts.parquet with categorical `lens` and `split`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd

from lenses_data.schemas import LENS_NAMES, SPLIT_NAMES

# (skimage.data function, subject words); the first 12 go to train, then 2 valid, 2 test.
SAMPLES: tuple[tuple[str, str], ...] = (
    ("astronaut", "an astronaut in a white suit"),
    ("camera", "a man holding a camera"),
    ("coffee", "a cup of coffee"),
    ("chelsea", "a ginger cat"),
    ("rocket", "a rocket on the launch pad"),
    ("coins", "a tray of old coins"),
    ("moon", "the cratered moon"),
    ("page", "a printed page of text"),
    ("clock", "a wall clock"),
    ("horse", "a black horse"),
    ("immunohistochemistry", "stained tissue cells"),
    ("logo", "a snake logo"),
    ("grass", "a field of grass"),
    ("gravel", "grey gravel stones"),
    ("brick", "a brick wall"),
    ("text", "painted street letters"),
)
CAPTION_TEMPLATES = (
    "A photo of {s}.",
    "{s} is a lighthouse in a sea of noise.",
    "{s} stands for patience and order.",
    "{s} recalls an old museum display.",
    "{s} makes me feel calm and curious.",
)
PROMPT_TEMPLATES = (
    "What is visible in {s}?",
    "What could {s} be a metaphor for?",
    "Which idea does {s} embody?",
    "What context surrounds {s}?",
    "How does {s} feel?",
)


def _split_of(i: int, n: int) -> str:
    return "train" if i < n - 4 else ("valid" if i < n - 2 else "test")


def _text_rows(
    kind: str, image_id: str, split: str, subject: str, lenses: list[int], templates
) -> list[dict]:
    rows = []
    for c in lenses:
        text = templates[c].format(s=subject)
        text = text[0].upper() + text[1:]
        lens = LENS_NAMES[c]
        tid = hashlib.sha256(f"{image_id}|{kind}|{lens}|0|{text}".encode()).hexdigest()[:16]
        rows.append(
            {"text_id": tid, "image_id": image_id, "split": split, "lens": lens, "text": text, "focus": subject,
             "idioms": [], "edited": False, "original_text": None, "prompt_hash": "synthetic", "model": "synthetic",
             "simulated": True}
        )  # fmt: skip
    return rows


def _prompt_lenses(i: int) -> list[int]:
    # varied prompt sets: all five, a single one, none at all, and partial sets
    return [[0, 1, 2, 3, 4], [0], [], [0, 2, 4], [1, 3]][i % 5]


def write_synthetic_export(out_dir: str | Path, n_images: int = 16) -> Path:
    """Write images (PNG) and the three tables; returns out_dir."""
    import numpy as np
    import skimage.data
    from PIL import Image

    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    images, captions, prompts = [], [], []
    for i, (name, subject) in enumerate(SAMPLES[:n_images]):
        arr = getattr(skimage.data, name)()
        im = Image.fromarray(np.asarray(arr)).convert("RGB")
        path = out / "images" / f"{name}.png"
        im.save(path)
        image_id = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        split = _split_of(i, n_images)
        images.append(
            {"image_id": image_id, "path": str(path.resolve()), "width": im.width, "height": im.height,
             "split": split, "source": f"skimage.data.{name}", "group_id": image_id}
        )  # fmt: skip
        cap_lenses = list(range(5)) if i % 3 else [0, 1, 4]
        captions += _text_rows("caption", image_id, split, subject, cap_lenses, CAPTION_TEMPLATES)
        prompts += _text_rows("prompt", image_id, split, subject, _prompt_lenses(i), PROMPT_TEMPLATES)
    for name, rows in (("images", images), ("captions", captions), ("prompts", prompts)):
        df = pd.DataFrame(rows)
        df["split"] = pd.Categorical(df["split"], categories=list(SPLIT_NAMES))
        if "lens" in df:
            df["lens"] = pd.Categorical(df["lens"], categories=list(LENS_NAMES))
        df.to_parquet(out / f"{name}.parquet", index=False)
    return out
