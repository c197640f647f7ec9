"""Reader and scorer for IRFL figurative detection (idioms, metaphors, similes).

A task CSV (e.g. idiom_detection_task.csv) has columns phrase, answer, distractors and optionally
figurative_type; answer/distractors cells are lists of image file names (JSON or Python list
syntax, or a single name) resolved inside `images_dir`.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from training.external.common import ExternalRejection, OnMissing, read_csv

IRFL_COLUMNS = ("phrase", "answer", "distractors")


def parse_name_list(cell: Any) -> list[str]:
    """An IRFL list cell ("['a.jpeg', 'b.jpeg']", JSON, or a single name) as a list of names."""
    if isinstance(cell, (list, tuple)):
        return [str(x) for x in cell]
    if not isinstance(cell, str) or not cell.strip():
        raise ValueError(f"empty image list cell: {cell!r}")
    text = cell.strip()
    if text.startswith("["):
        for parse in (json.loads, ast.literal_eval):
            try:
                value = parse(text)
            except (ValueError, SyntaxError):
                continue
            if isinstance(value, list):
                return [str(x) for x in value]
        raise ValueError(f"cannot parse image list cell: {cell!r}")
    return [text]


@dataclass
class DetectionTask:
    """IRFL detection rows: candidates per phrase are distractors first, then answers."""

    phrases: list[str]
    figurative_type: list[str]
    image_paths: list[str]  # unique images over all rows
    candidates: list[np.ndarray]  # per row: indices into image_paths
    n_answers: np.ndarray  # per row: the last n_answers candidates are correct
    rejections: list[ExternalRejection] = field(default_factory=list)


def read_irfl(
    csv_path: str | Path,
    images_dir: str | Path,
    *,
    on_missing: OnMissing = "error",
    default_type: str = "unknown",
    split: str | None = None,
) -> DetectionTask:
    """IRFL detection rows (optionally only rows whose `split` column matches, e.g. "train")."""
    df = read_csv(csv_path, IRFL_COLUMNS, "IRFL")
    if split is not None:
        if "split" not in df.columns:
            raise ValueError(f"split={split!r} requested but {csv_path} has no 'split' column")
        df = df[df["split"] == split]
    root = Path(images_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"IRFL image folder not found: {root}")
    types = df["figurative_type"] if "figurative_type" in df.columns else [default_type] * len(df)
    index: dict[str, int] = {}
    task = DetectionTask([], [], [], [], np.zeros(0, np.int64))
    n_answers = []
    for row, (phrase, answer, distractors, ftype) in enumerate(
        zip(df["phrase"], df["answer"], df["distractors"], types, strict=True)
    ):
        try:
            names = parse_name_list(distractors) + parse_name_list(answer)
        except ValueError as err:
            raise ValueError(f"{csv_path} row {row}: {err}") from None
        missing = [n for n in names if not (root / n).is_file()]
        if missing:
            msg = f"row {row}: images not found in {root}: {missing[:3]}"
            if on_missing == "error":
                raise FileNotFoundError(msg)
            task.rejections.append(ExternalRejection(row, "image_missing", msg))
            continue
        for name in names:
            index.setdefault(name, len(index))
        task.phrases.append(str(phrase))
        task.figurative_type.append(str(ftype))
        task.candidates.append(np.asarray([index[n] for n in names]))
        n_answers.append(len(parse_name_list(answer)))
    task.image_paths = [str(root / n) for n in index]
    task.n_answers = np.asarray(n_answers, dtype=np.int64)
    if not task.phrases:
        where = f" with split={split!r}" if split is not None else ""
        raise ValueError(f"no usable IRFL rows in {csv_path}{where} ({len(task.rejections)} rejected)")
    return task


def detection_accuracy(task: DetectionTask, sim: Any) -> dict[str, float]:
    """Accuracy (%) of picking a correct image, overall and per figurative type.

    sim: [n_phrases, n_images] scores. Ties go to the earlier candidate; distractors come
    first, so a tie never counts in the model's favour.
    """
    sim = np.asarray(sim)
    if sim.shape != (len(task.phrases), len(task.image_paths)):
        raise ValueError(f"sim must be {len(task.phrases)}x{len(task.image_paths)}, got {sim.shape}")
    correct = np.zeros(len(task.phrases), bool)
    for row, cand in enumerate(task.candidates):
        best = int(np.argmax(sim[row, cand]))  # argmax returns the first of equal maxima
        correct[row] = best >= len(cand) - task.n_answers[row]
    out = {"accuracy": float(correct.mean() * 100)}
    types = np.asarray(task.figurative_type)
    for t in sorted(set(task.figurative_type)):
        out[f"accuracy/{t}"] = float(correct[types == t].mean() * 100)
    return out
