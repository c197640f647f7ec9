"""The IMP difficulty split (seed 003 Sec. 4.2) of an export split's true image-caption pairs.

Each open_clip model of `EvalConfig.imp.models` (local checkpoints only) gets a matching
threshold: a fixed one from the config, or the F1 argmax of its precision-recall curve on the
user's calibration table (`imp_metrics.calibrate_threshold`). Every caption of the split is then
scored with its own image by every model; a voter accepts the pair when its cosine reaches its
threshold, and `imp_metrics.vote_difficulty` turns the votes (and the tie-breaker's, if any) into
Easy / Medium / Hard. Output under `<out_dir>/imp/`: `difficulty.parquet` (one row per caption:
text_id, image_id, difficulty, votes, per-model score and vote) and `thresholds.json`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from training.evaluation.config import EvalConfig, ImpCalibrationSection, ImpModelSection, ImpSection
from training.evaluation.imp.metrics import DIFFICULTIES, UNLABELLED, calibrate_threshold, vote_difficulty
from training.evaluation.types import SplitLabels

log = logging.getLogger(__name__)


def read_calibration(section: ImpCalibrationSection) -> tuple[list[str], list[str], np.ndarray | None]:
    """(image paths, texts, labels or None) of the calibration table; relative paths resolved."""
    path = Path(section.table)
    if not path.is_file():
        raise FileNotFoundError(f"IMP calibration table not found: {path}")
    df = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    missing = {"image", "text"} - set(df.columns)
    if missing:
        raise ValueError(f"calibration table {path} lacks columns {sorted(missing)}; has {list(df.columns)}")
    if df.empty:
        raise ValueError(f"calibration table {path} has no rows")
    root = Path(section.image_root) if section.image_root else path.parent
    paths = [str(p if Path(p).is_absolute() else root / p) for p in df["image"].astype(str)]
    absent = [p for p in paths if not Path(p).is_file()]
    if absent:
        raise FileNotFoundError(f"{len(absent)} calibration images not found, e.g. {absent[:3]}")
    labels = df["label"].astype(int).to_numpy() if "label" in df.columns else None
    if labels is not None and not set(np.unique(labels)) <= {0, 1}:
        raise ValueError(f"calibration labels must be 0 or 1 in {path}")
    return paths, df["text"].astype(str).tolist(), labels


def _encode(bundle, paths: list[str], texts: list[str], batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    from training.baselines.open_clip import encode_open_clip

    return encode_open_clip(*bundle, paths, texts, batch_size=batch_size)  # unit-norm [n, d] each


def calibration_scores(
    img: torch.Tensor, txt: torch.Tensor, labels: np.ndarray | None, batch: int
) -> tuple[np.ndarray, np.ndarray]:
    """(scores, labels) of the calibration pairs.

    img, txt: [n, d] unit-norm, row i the i-th pair. With labels, row i is one pair. Without,
    every row is a matching pair and, within each batch of `batch` rows, the diagonal entries
    are positives and all off-diagonal entries negatives (the paper's scheme on DataComp).
    """
    if labels is not None:
        return (img * txt).sum(-1).numpy(), labels.astype(bool)
    scores, truth = [], []
    for i in range(0, len(img), batch):
        s = img[i : i + batch] @ txt[i : i + batch].T  # [b, b]
        scores.append(s.numpy().ravel())
        truth.append(np.eye(len(s), dtype=bool).ravel())
    return np.concatenate(scores), np.concatenate(truth)


def _threshold(model: ImpModelSection, bundle, imp: ImpSection, calib) -> dict:
    if model.threshold is not None:
        return {"threshold": float(model.threshold), "source": "fixed"}
    paths, texts, labels = calib
    img, txt = _encode(bundle, paths, texts, imp.batch_size)
    cal = calibrate_threshold(*calibration_scores(img, txt, labels, imp.calibration.batch_size))
    return {"source": "calibrated", **asdict(cal)}


def load_imp_model(model: ImpModelSection, device: str):
    """An IMP ensemble model (open_clip, local files only) as (model, preprocess, tokenizer)."""
    from training.baselines.open_clip import load_open_clip
    from training.evaluation.config import CONFIG_DIR

    arch = model.model_config_path
    if arch and not Path(arch).is_file() and (CONFIG_DIR / Path(arch).name).is_file():
        arch = str(CONFIG_DIR / Path(arch).name)
    if model.pretrained is None:
        log.warning("IMP model %s has RANDOM weights (pretrained: null): its votes mean nothing", model.name)
    return load_open_clip(model.model_name, pretrained=model.pretrained, model_config=arch, device=device)


def difficulty_table(cfg: EvalConfig, labels: SplitLabels) -> tuple[pd.DataFrame, dict]:
    """(one row per caption with its difficulty, votes and scores; thresholds per model)."""
    imp = cfg.imp
    calib = read_calibration(imp.calibration) if imp.calibration is not None else None
    ci = np.asarray(labels.caption_image)
    table = pd.DataFrame({"text_id": labels.caption_ids, "image_id": [labels.image_ids[i] for i in ci]})
    thresholds: dict[str, dict] = {}
    for model in imp.models:
        bundle = load_imp_model(model, imp.device)
        thresholds[model.name] = {"role": model.role, **_threshold(model, bundle, imp, calib)}
        img, txt = _encode(bundle, labels.image_paths, labels.captions, imp.batch_size)
        score = (img[torch.as_tensor(ci)] * txt).sum(-1).numpy()  # [n_captions] cosine with own image
        table[f"score/{model.name}"] = score.astype(np.float32)
        table[f"accept/{model.name}"] = score >= thresholds[model.name]["threshold"]
        del bundle
        log.info("IMP %s %s: threshold %.4f", model.role, model.name, thresholds[model.name]["threshold"])
    voters = [f"accept/{m.name}" for m in imp.models if m.role == "voter"]
    breaker = [f"accept/{m.name}" for m in imp.models if m.role == "tie_breaker"]
    codes = vote_difficulty(table[voters].to_numpy(), table[breaker[0]].to_numpy() if breaker else None)
    table["votes"] = table[voters].sum(axis=1).astype(np.int16)
    table["n_voters"] = np.int16(len(voters))
    table["difficulty"] = pd.Categorical.from_codes(codes, categories=list(DIFFICULTIES))
    return table, thresholds


def write_imp_split(cfg: EvalConfig, labels: SplitLabels | None = None) -> dict[str, Path]:
    """Compute the difficulty split of cfg's export split and write it under <out_dir>/imp/."""
    from training.evaluation.inputs import split_labels

    if cfg.imp is None or not cfg.imp.models:
        raise ValueError("set imp.models (open_clip voters, optional tie_breaker) in the evaluation config")
    labels = labels or split_labels(cfg.export_dir, cfg.split)
    table, thresholds = difficulty_table(cfg, labels)
    out = Path(cfg.out_dir) / "imp"
    out.mkdir(parents=True, exist_ok=True)
    paths = {"difficulty": out / "difficulty.parquet", "thresholds": out / "thresholds.json"}
    table.to_parquet(paths["difficulty"], index=False)
    counts = table["difficulty"].value_counts().reindex(list(DIFFICULTIES), fill_value=0)
    summary = {"split": cfg.split, "counts": {k: int(v) for k, v in counts.items()}, "models": thresholds}
    paths["thresholds"].write_text(json.dumps(summary, indent=2))
    return paths


def difficulty_codes(cfg: EvalConfig, labels: SplitLabels) -> tuple[np.ndarray, dict]:
    """Difficulty code per caption of `labels` (-1 when the table has no row for it), and a summary."""
    source = cfg.imp.difficulty_table
    if source is None:
        source = str(write_imp_split(cfg, labels)["difficulty"])
    path = Path(source)
    if not path.is_file():
        raise FileNotFoundError(f"IMP difficulty table not found: {path} (run `lenses imp-split`)")
    table = pd.read_parquet(path, columns=["text_id", "difficulty"])
    code_of = dict(zip(table["text_id"].astype(str), table["difficulty"].astype(str), strict=True))
    index = {name: i for i, name in enumerate(DIFFICULTIES)}
    codes = np.array([index.get(code_of.get(t, ""), UNLABELLED) for t in labels.caption_ids], np.int64)
    if (codes == UNLABELLED).all():
        raise ValueError(f"no caption of the evaluated split is in {path}: wrong split or export?")
    summary = {"table": str(path), "n_unlabelled": int((codes == UNLABELLED).sum())}
    thresholds = path.with_name("thresholds.json")
    if thresholds.is_file():
        summary["models"] = json.loads(thresholds.read_text()).get("models", {})
    return codes, summary
