"""The LoRA-CLIP run (seed 004): read IRFL's train split, mine with the frozen model, train, save.

Steps: (1) the base open_clip model wrapped with LoRA (factors B start at zero, so with or
without adapters it is the base model); (2) phrases and images scored with the adapters
disabled, and hard literal negatives mined once; (3) `optim.epochs` passes over the shuffled
triples with L_dev and AdamW on the LoRA factors only; (4) the adapter saved to
`run.out_dir/adapter` after every epoch, with `history.json` (loss per epoch, L_dev over all
triples in eval mode before and after training, trainable parameter counts).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from training.baselines.lora_clip.config import LoraClipConfig
from training.baselines.lora_clip.inference import load_images, text_image_scores
from training.baselines.lora_clip.losses import deviation_loss, triple_scores
from training.baselines.lora_clip.mining import Triples, mine_hard_negatives
from training.baselines.lora_clip.model import build_lora_clip, save_adapter
from training.external.irfl import DetectionTask, read_irfl

log = logging.getLogger(__name__)


@dataclass
class LoraClipResult:
    adapter_dir: Path
    n_triples: int
    n_trainable: int
    n_total: int
    loss_before: float
    loss_after: float
    epoch_loss: list[float] = field(default_factory=list)
    triples: Triples | None = None  # the mined (row, fig, lit) indices


def trainable_counts(model) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def _batch_loss(
    model, preprocess, tokenizer, task: DetectionTask, triples: Triples, idx: np.ndarray, tau: float
):
    """L_dev of the triples idx, each unique image and phrase encoded once."""
    dev = next(model.parameters()).device
    images, img_pos = np.unique(np.concatenate([triples.fig[idx], triples.lit[idx]]), return_inverse=True)
    rows, txt_pos = np.unique(triples.row[idx], return_inverse=True)
    img = model.encode_image(load_images([task.image_paths[i] for i in images], preprocess).to(dev))  # [U, d]
    txt = model.encode_text(tokenizer([task.phrases[r] for r in rows]).to(dev))  # [R, d]
    n = len(idx)
    fig_pos, lit_pos = torch.as_tensor(img_pos[:n], device=dev), torch.as_tensor(img_pos[n:], device=dev)
    txt_rows = torch.as_tensor(txt_pos, device=dev)
    s_fig, s_lit = triple_scores(txt[txt_rows], img[fig_pos], img[lit_pos])  # [T], [T]
    return deviation_loss(s_fig, s_lit, tau)


@torch.no_grad()
def triples_loss(model, preprocess, tokenizer, task, triples: Triples, tau: float, batch_size: int) -> float:
    """Mean L_dev over all triples in eval mode (the number a tiny run must lower)."""
    model.eval()
    total = 0.0
    for start in range(0, len(triples), batch_size):
        idx = np.arange(start, min(start + batch_size, len(triples)))
        total += float(_batch_loss(model, preprocess, tokenizer, task, triples, idx, tau)) * len(idx)
    return total / max(len(triples), 1)


def mine_with_base_model(model, preprocess, tokenizer, task: DetectionTask, cfg: LoraClipConfig) -> Triples:
    """Hard literal negatives under the frozen base model (LoRA adapters switched off)."""
    model.eval()
    with model.disable_adapter():
        sim = text_image_scores(
            model, preprocess, tokenizer, task.image_paths, task.phrases, cfg.run.encode_batch_size
        )  # [n_phrases, n_images]
    return mine_hard_negatives(task, sim, top_k=cfg.mining.top_k, pool=cfg.mining.pool)


def train_lora_clip(cfg: LoraClipConfig) -> LoraClipResult:
    torch.manual_seed(cfg.optim.seed)
    d = cfg.data
    task = read_irfl(d.train_csv, d.images_dir, on_missing=d.on_missing, split=d.split)
    model, preprocess, tokenizer = build_lora_clip(cfg.clip, cfg.lora, cfg.run.device)
    triples = mine_with_base_model(model, preprocess, tokenizer, task, cfg)
    if len(triples) == 0:
        raise ValueError(f"no training triples: no row of {d.train_csv} has a literal distractor")
    n_trainable, n_total = trainable_counts(model)
    log.info("LoRA-CLIP: %d rows, %d triples, %d of %d parameters trainable",
             len(task.phrases), len(triples), n_trainable, n_total)  # fmt: skip
    o = cfg.optim
    before = triples_loss(model, preprocess, tokenizer, task, triples, o.tau, cfg.run.encode_batch_size)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=o.lr, weight_decay=o.weight_decay)
    rng = np.random.default_rng(o.seed)
    out_dir = Path(cfg.run.out_dir)
    epoch_loss: list[float] = []
    for epoch in range(o.epochs):
        model.train()
        order, losses = rng.permutation(len(triples)), []
        for start in range(0, len(order), o.batch_size):
            loss = _batch_loss(
                model, preprocess, tokenizer, task, triples, order[start : start + o.batch_size], o.tau
            )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        epoch_loss.append(float(np.mean(losses)))
        log.info("LoRA-CLIP epoch %d/%d: mean L_dev %.4f", epoch + 1, o.epochs, epoch_loss[-1])
        save_adapter(model, out_dir / "adapter", cfg.clip, cfg.lora)
    after = triples_loss(model, preprocess, tokenizer, task, triples, o.tau, cfg.run.encode_batch_size)
    result = LoraClipResult(
        out_dir / "adapter", len(triples), n_trainable, n_total, before, after, epoch_loss, triples
    )
    _write_history(result, cfg, out_dir)
    return result


def _write_history(result: LoraClipResult, cfg: LoraClipConfig, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    info = {k: v for k, v in result.__dict__.items() if k != "triples"}
    info["adapter_dir"] = str(result.adapter_dir)
    if result.triples is not None:
        t = result.triples
        info["triples"] = {"row": t.row.tolist(), "fig": t.fig.tolist(), "lit": t.lit.tolist()}
    info["config"] = cfg.model_dump(mode="json")
    (out_dir / "history.json").write_text(json.dumps(info, indent=2) + "\n")
