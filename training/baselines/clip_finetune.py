"""CLIP fine-tuned on Lenses (supp. Table 9): an open_clip model trained on the export's train split
with one global embedding per image and caption, then scored by global cosine like the other
single-embedding baselines.

Recipe (supp. Sec. 7, the fine-tuned baseline's; the supplement states none for CLIP): every
caption of an image in the batch is a positive (multi-positive InfoNCE of
`training.retriever.losses`, both directions, tau 0.07), AdamW with weight decay 0.01 through
`training.loop.optim`, cosine schedule 5e-5 -> 1e-6, global grad norm clipped at 1.0. Images
are drawn in shuffled passes over the split. All weights are trained (not stated in the paper).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from training.baselines.clip_finetune_config import ClipFinetuneSection

log = logging.getLogger(__name__)
ROW = "CLIP (fine-tuned on Lenses)"
WEIGHTS = "model.pt"


@dataclass
class ClipFinetuneRun:
    weights: Path
    n_images: int
    n_captions: int
    losses: list[float] = field(default_factory=list)


def _optim_config(section: ClipFinetuneSection):
    from training.retriever.config import OptimConfig

    return OptimConfig(
        lr=section.lr, min_lr=section.min_lr, warmup_steps=0, weight_decay=section.weight_decay,
        grad_clip=section.grad_clip, accum_steps=1, max_steps=section.steps,
    )  # fmt: skip


def load_base(section: ClipFinetuneSection):
    """(model, preprocess, tokenizer) before fine-tuning, from local files only."""
    from training.baselines.open_clip import load_open_clip

    return load_open_clip(
        section.model_name, pretrained=section.pretrained, model_config=section.model_config_path,
        device=section.device,
    )  # fmt: skip


def _batches(n_images: int, per_batch: int, steps: int, seed: int):
    """Image indices per step: shuffled passes over the split, each pass reshuffled."""
    rng = np.random.default_rng(seed)
    order: list[int] = []
    for _ in range(steps):
        if len(order) < per_batch:
            order += rng.permutation(n_images).tolist()
        yield order[:per_batch]
        order = order[per_batch:]


def _step_loss(model, preprocess, tokenizer, records, idx: list[int], tau: float) -> torch.Tensor:
    from training.baselines.lora_clip.inference import load_images
    from training.retriever.losses import retrieval_loss

    dev = next(model.parameters()).device
    texts = [text for i in idx for text, _ in records[i].captions]
    owner = torch.tensor([k for k, i in enumerate(idx) for _ in records[i].captions], device=dev)
    img = F.normalize(
        model.encode_image(load_images([records[i].path for i in idx], preprocess).to(dev)), dim=-1
    )
    txt = F.normalize(model.encode_text(tokenizer(texts).to(dev)), dim=-1)
    return retrieval_loss(img @ txt.T, torch.arange(len(idx), device=dev), owner, tau)


def train_clip_finetune(
    section: ClipFinetuneSection, export_dir: str, out_dir: str | Path
) -> ClipFinetuneRun:
    """Fine-tune on the train split; writes out_dir/model.pt and out_dir/history.json."""
    from training.loop.data import load_records
    from training.loop.optim import build_optimizer, lr_at, set_lr

    torch.manual_seed(section.seed)
    records = load_records(export_dir, "train")
    if len(records) < 2:
        raise ValueError(f"CLIP fine-tuning needs at least 2 train images with captions, got {len(records)}")
    model, preprocess, tokenizer = load_base(section)
    model.train()
    ocfg = _optim_config(section)
    opt = build_optimizer(model, ocfg)
    per_batch = min(section.images_per_batch, len(records))
    losses = []
    for step, idx in enumerate(_batches(len(records), per_batch, section.steps, section.seed)):
        set_lr(opt, lr_at(step, ocfg))
        loss = _step_loss(model, preprocess, tokenizer, records, idx, section.tau)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), section.grad_clip)
        opt.step()
        losses.append(loss.item())
        log.info("CLIP fine-tune step %d/%d: loss %.4f", step + 1, section.steps, losses[-1])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), out / WEIGHTS)
    run = ClipFinetuneRun(out / WEIGHTS, len(records), sum(len(r.captions) for r in records), losses)
    history = {"losses": losses, "n_images": run.n_images, "n_captions": run.n_captions,
               "config": section.model_dump(mode="json"), "export_dir": str(export_dir)}  # fmt: skip
    (out / "history.json").write_text(json.dumps(history, indent=2) + "\n")
    return run


def load_finetuned(section: ClipFinetuneSection, weights: str | Path):
    """(model, preprocess, tokenizer) with fine-tuned weights, in eval mode."""
    path = Path(weights)
    if not path.is_file():
        raise FileNotFoundError(f"fine-tuned CLIP weights not found: {path}")
    model, preprocess, tokenizer = load_base(section)
    model.load_state_dict(torch.load(path, map_location=section.device, weights_only=True))
    model.eval()
    return model, preprocess, tokenizer


def clip_finetune_scores(
    section: ClipFinetuneSection,
    export_dir: str,
    out_dir: str | Path,
    image_paths: list[str],
    captions: list[str],
) -> tuple[np.ndarray, dict]:
    """(global cosine scores [n_images, n_captions] of the fine-tuned model, how it was obtained)."""
    from training.baselines.global_only import global_scores
    from training.baselines.open_clip import encode_open_clip

    if section.checkpoint is not None:
        weights, info = Path(section.checkpoint), {"checkpoint": section.checkpoint, "trained_here": False}
    else:
        run = train_clip_finetune(section, export_dir, out_dir)
        weights = run.weights
        info = {"checkpoint": str(weights), "trained_here": True, "steps": section.steps,
                "n_train_images": run.n_images, "n_train_captions": run.n_captions,
                "first_loss": run.losses[0], "last_loss": run.losses[-1]}  # fmt: skip
    bundle = load_finetuned(section, weights)
    img, txt = encode_open_clip(*bundle, image_paths, captions, batch_size=section.batch_size)
    return global_scores(img, txt), info


def clip_finetune_system(cfg, labels, texts: list[str] | None = None) -> tuple[dict[str, np.ndarray], dict]:
    """({ROW: scores} on the evaluated split, {"clip_finetune": run info} for the results' meta) when
    baselines.clip_finetune is enabled, else ({}, {}).

    cfg: the EvalConfig; labels: its split (training.evaluation.types.SplitLabels); texts: the
    texts to score (default the split's captions).
    """
    section = cfg.baselines.clip_finetune
    if not section.enabled:
        return {}, {}
    out_dir = section.out_dir or str(Path(cfg.out_dir) / "clip_finetune")
    texts = labels.captions if texts is None else texts
    scores, info = clip_finetune_scores(section, cfg.export_dir, out_dir, labels.image_paths, texts)
    return {ROW: scores}, {"clip_finetune": info}
