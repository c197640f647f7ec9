"""A tiny IRFL-shaped folder for tests and `lenses train-lora-clip --config lora-clip-tiny` dry runs.

16 images (8 skimage.data pictures, each also mirrored, 48 px) and a detection-task CSV in IRFL's
format (`phrase, figurative_type, split, answer, distractors`; list cells in Python list syntax):
six train rows and two test rows, one answer and three distractors each.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

PICTURES = ("astronaut", "coffee", "chelsea", "rocket", "camera", "coins", "immunohistochemistry", "moon")
ROWS = (  # phrase, figurative type, split
    ("break the ice", "idiom", "train"),
    ("spill the beans", "idiom", "train"),
    ("cold feet", "idiom", "train"),
    ("as cold as ice", "simile", "train"),
    ("time is a thief", "metaphor", "train"),
    ("a piece of cake", "idiom", "train"),
    ("hit the sack", "idiom", "test"),
    ("as busy as a bee", "simile", "test"),
)


def write_synthetic_irfl(root: str | Path, seed: int = 0) -> tuple[Path, Path]:
    """(csv path, images folder) of a new tiny IRFL folder under root."""
    import pandas as pd
    from PIL import Image
    from skimage import data

    root = Path(root)
    images = root / "images"
    images.mkdir(parents=True, exist_ok=True)
    names = []
    for pic in PICTURES:
        arr = getattr(data, pic)()
        arr = np.stack([arr] * 3, axis=-1) if arr.ndim == 2 else arr
        for suffix, a in (("", arr), ("_flip", arr[:, ::-1])):
            name = f"{pic}{suffix}.jpeg"
            Image.fromarray(np.ascontiguousarray(a)).resize((48, 48)).save(images / name)
            names.append(name)
    rng = np.random.default_rng(seed)
    rows = []
    for phrase, ftype, split in ROWS:
        pick = rng.choice(len(names), size=4, replace=False)
        answer, distractors = str([names[pick[0]]]), str([names[i] for i in pick[1:]])
        rows.append({"phrase": phrase, "figurative_type": ftype, "split": split, "answer": answer,
                     "distractors": distractors})  # fmt: skip
    csv = root / "irfl.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    return csv, images
