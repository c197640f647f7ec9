"""A tiny IRFL-shaped folder (skimage pictures) and the tiny LoRA-CLIP config pointing at it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

PICTURES = ("astronaut", "coffee", "chelsea", "rocket", "camera", "coins", "immunohistochemistry", "moon")
# phrase, figurative type, split: each row has one answer and three distractors (IRFL's detection shape)
ROWS = (
    ("break the ice", "idiom", "train"),
    ("spill the beans", "idiom", "train"),
    ("cold feet", "idiom", "train"),
    ("as cold as ice", "simile", "train"),
    ("time is a thief", "metaphor", "train"),
    ("a piece of cake", "idiom", "train"),
    ("hit the sack", "idiom", "test"),
    ("as busy as a bee", "simile", "test"),
)


def write_irfl_folder(root):
    """16 images (8 skimage pictures, each also mirrored) and a detection CSV with a split column."""
    from PIL import Image
    from skimage import data

    images = root / "images"
    images.mkdir(parents=True)
    names = []
    for pic in PICTURES:
        arr = getattr(data, pic)()
        arr = np.stack([arr] * 3, axis=-1) if arr.ndim == 2 else arr
        for suffix, a in (("", arr), ("_flip", arr[:, ::-1])):
            name = f"{pic}{suffix}.jpeg"
            Image.fromarray(np.ascontiguousarray(a)).resize((48, 48)).save(images / name)
            names.append(name)
    rng = np.random.default_rng(0)
    rows = []
    for phrase, ftype, split in ROWS:
        pick = rng.choice(len(names), size=4, replace=False)
        # list cells in Python list syntax, as IRFL's CSVs write them
        answer, distractors = str([names[pick[0]]]), str([names[i] for i in pick[1:]])
        rows.append({"phrase": phrase, "figurative_type": ftype, "split": split, "answer": answer,
                     "distractors": distractors})  # fmt: skip
    csv = root / "irfl.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    return csv, images


@pytest.fixture(scope="session")
def irfl_folder(tmp_path_factory):
    return write_irfl_folder(tmp_path_factory.mktemp("irfl"))


@pytest.fixture()
def tiny_lora_cfg(irfl_folder, tmp_path):
    from training.baselines.lora_clip.config import CONFIG_DIR, load_lora_clip_config

    csv, images = irfl_folder
    overrides = {
        "clip": {"model_config_path": str(CONFIG_DIR / "lora-clip-tiny-openclip.json")},
        "data": {"train_csv": str(csv), "images_dir": str(images)},
        "run": {"out_dir": str(tmp_path / "run")},
    }
    return load_lora_clip_config("lora-clip-tiny", overrides)
