"""IRFL figurative detection of every system, as seed 004's IRFL table (its Table 3) lays it out.

Rows (systems) follow the seed's table: zero-shot CLIP, the weighted ensemble, the supervised MLP,
LoRA-CLIP, human; plus the lens model. Columns: accuracy (Precision@1, %) per figurative type
(Idioms, Metaphors, Similes), then over all rows accuracy, similarity margin and literal-bias
rate (seed Sec. 6.2; `training.baselines.lora_clip.metrics`). Every configured IRFL CSV is
pooled into one task. A system this code cannot score is listed with the reason.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from training.baselines.lora_clip.metrics import figurative_metrics
from training.external.irfl import DetectionTask, read_irfl

ZERO_SHOT = "CLIP (IRFL zero-shot), open_clip"
LORA_CLIP = "Ours: LoRA-CLIP (seed 004)"
TYPE_COLUMNS = (("idiom", "Idioms"), ("metaphor", "Metaphors"), ("simile", "Similes"))
UNAVAILABLE = {
    "Ours: Weighted Ens. (seed 004)": "not run: configure baselines.irfl_fusion (members, valid rows)",
    "Ours: Supervised MLP (seed 004)": "not run: configure baselines.irfl_fusion (members, train and valid rows)",
    "Lenses (lens model)": "the lens model encodes an image together with its image-side prompts; IRFL has none",
    "Human (IRFL)": "a human study (the IRFL paper reports 97 / 99.7 / 100), not computable",
}


def merge_tasks(tasks: list[DetectionTask]) -> DetectionTask:
    """One task holding every row of `tasks` (image indices shifted, shared files kept apart)."""
    merged = DetectionTask([], [], [], [], np.zeros(0, np.int64))
    n_answers = []
    for task in tasks:
        offset = len(merged.image_paths)
        merged.phrases += task.phrases
        merged.figurative_type += task.figurative_type
        merged.candidates += [np.asarray(c) + offset for c in task.candidates]
        merged.image_paths += task.image_paths
        merged.rejections += task.rejections
        n_answers.append(task.n_answers)
    merged.n_answers = np.concatenate(n_answers) if n_answers else np.zeros(0, np.int64)
    return merged


def read_irfl_items(items) -> tuple[DetectionTask, dict[str, DetectionTask]]:
    """(all rows pooled, per CSV stem) of the configured `external.irfl` items."""
    from pathlib import Path

    per_item = {
        Path(i.csv).stem: read_irfl(i.csv, i.images_dir, on_missing=i.on_missing, split=i.split)
        for i in items
    }
    return merge_tasks(list(per_item.values())), per_item


def lora_clip_scores(section, image_paths: list[str], texts: list[str]) -> np.ndarray:
    """[n_texts, n_images] cosine scores of a trained LoRA-CLIP adapter folder."""
    from training.baselines.lora_clip.inference import text_image_scores
    from training.baselines.lora_clip.model import load_lora_clip

    model, preprocess, tokenizer = load_lora_clip(section.adapter_dir, section.device, section.pretrained)
    return text_image_scores(model, preprocess, tokenizer, image_paths, texts, section.batch_size)


def irfl_table(task: DetectionTask, scores: dict[str, np.ndarray], reasons: dict[str, str]) -> dict[str, Any]:
    """{"systems": {name: metrics or {"unavailable": reason}}, "n_rows", "types"} in the table's order.

    scores: per system, [n_phrases, n_images] over the pooled task. Systems outside the seed's
    rows (e.g. "BLIP-2 (zero-shot)") follow the zero-shot CLIP row; reasons name the others.
    """
    systems: dict[str, Any] = {}
    seed_rows = (ZERO_SHOT, *list(UNAVAILABLE)[:2], LORA_CLIP, *list(UNAVAILABLE)[2:])
    extra = [n for n in [*scores, *reasons] if n not in seed_rows]
    for name in dict.fromkeys((ZERO_SHOT, *extra, *seed_rows[1:])):
        if name in scores:
            systems[name] = figurative_metrics(task, scores[name])
        else:
            systems[name] = {"unavailable": reasons.get(name) or UNAVAILABLE.get(name, "not configured")}
    return {"systems": systems, "n_rows": len(task.phrases), "types": sorted(set(task.figurative_type))}


def _cell(m: dict[str, Any], key: str, digits: int) -> str:
    value = m.get(key)
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "-"
    return f"{value:+.{digits}f}" if key == "margin" else f"{value:.{digits}f}"


def irfl_table_markdown(table: dict[str, Any]) -> str:
    """Seed 004 Table 3 layout (accuracy per type) with margin and literal bias (its Table 8's columns)."""
    header = ["Model", *(title for _, title in TYPE_COLUMNS), "All Acc (%)", "Margin", "LitBias (%)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for name, m in table["systems"].items():
        if "unavailable" in m:
            cells = ["unavailable"] * (len(header) - 1)
            why = m["unavailable"]
            cells[-1] = why if why.startswith("not run") else f"unavailable: {why}"
        else:
            cells = [_cell(m, f"accuracy/{t}", 1) for t, _ in TYPE_COLUMNS]
            cells += [_cell(m, "accuracy", 1), _cell(m, "margin", 3), _cell(m, "literal_bias", 1)]
        lines.append("| " + " | ".join([name, *cells]) + " |")
    return "\n".join(lines)
