"""The dataset card's figures (cf. Figure 3 of the paper): lens distribution, captions per image and
prompts per image, as PNGs under figures/ (matplotlib imported only here, when a card is written)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from lenses_data.schemas import LENS_NAMES

FIGURES = "figures"


def plot_figures(out: Path, images: pd.DataFrame, captions: pd.DataFrame, prompts: pd.DataFrame) -> list[str]:
    """Figure 3 of the paper as three PNGs; returns their paths relative to `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = out / FIGURES
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    fig, ax = plt.subplots(figsize=(5, 3.2))
    counts = captions["lens"].astype(str).value_counts()
    ax.bar(LENS_NAMES, [int(counts.get(n, 0)) for n in LENS_NAMES], color="#4C72B0")
    ax.set_title("Captions per lens")
    ax.set_ylabel("captions")
    ax.tick_params(axis="x", labelrotation=20)
    written.append(_save(fig, folder / "lens_distribution.png", plt))
    for name, texts in (("captions", captions), ("prompts", prompts)):
        per_image = texts.groupby("image_id").size().reindex(images["image_id"], fill_value=0)
        fig, ax = plt.subplots(figsize=(5, 3.2))
        top = int(per_image.max()) if len(per_image) else 1
        ax.hist(per_image, bins=range(0, top + 2), align="left", color="#55A868", rwidth=0.85)
        ax.set_title(f"{name.capitalize()} per image")
        ax.set_xlabel(f"{name} per image")
        ax.set_ylabel("images")
        written.append(_save(fig, folder / f"{name}_per_image.png", plt))
    return [str(Path(FIGURES) / Path(p).name) for p in written]


def _save(fig: Any, path: Path, plt: Any) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)
