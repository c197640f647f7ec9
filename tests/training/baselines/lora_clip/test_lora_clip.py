"""LoRA-CLIP on a tiny random-weight open_clip ViT (12 blocks, built from a JSON config)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from training.baselines.lora_clip.config import LoraSection
from training.baselines.lora_clip.inference import text_image_scores
from training.baselines.lora_clip.metrics import figurative_metrics
from training.baselines.lora_clip.mining import mine_hard_negatives
from training.baselines.lora_clip.model import ProjectedClip, build_lora_clip, load_lora_clip
from training.baselines.lora_clip.train import train_lora_clip, trainable_counts
from training.baselines.open_clip import encode_open_clip, load_open_clip
from training.external.irfl import read_irfl


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)  # tiny matrices; the box has 2 shared cores


def _arch(cfg):
    return json.loads(open(cfg.clip.model_config_path).read())


def test_projected_clip_keeps_open_clip_embeddings(tiny_lora_cfg, irfl_folder):
    c = tiny_lora_cfg.clip
    torch.manual_seed(0)
    clip, preprocess, tokenizer = load_open_clip(c.model_name, model_config=c.model_config_path)
    task = read_irfl(*irfl_folder)
    img, txt = encode_open_clip(clip, preprocess, tokenizer, task.image_paths, task.phrases)
    wrapped = ProjectedClip(clip).eval()
    sim = text_image_scores(wrapped, preprocess, tokenizer, task.image_paths, task.phrases)
    assert np.allclose(sim, (txt @ img.T).numpy(), atol=1e-5)


def _lora_block_indices(model, tower_prefix: str) -> set[int]:
    pattern = re.compile(rf"{tower_prefix}\.resblocks\.(\d+)\.attn\.lora_A")
    return {int(m.group(1)) for n, _ in model.named_parameters() if (m := pattern.search(n))}


def test_only_lora_factors_train_on_blocks_9_to_11(tiny_lora_cfg):
    cfg = tiny_lora_cfg
    model, _, _ = build_lora_clip(cfg.clip, cfg.lora)
    arch, r = _arch(cfg), cfg.lora.r
    wv, wt, d = arch["vision_cfg"]["width"], arch["text_cfg"]["width"], arch["embed_dim"]
    # per adapted attention: in_proj (w -> 3w) and out_proj (w -> w); per projection: w -> d
    attention = 3 * sum((r * w + 3 * w * r) + (r * w + w * r) for w in (wv, wt))
    projections = (r * wv + d * r) + (r * wt + d * r)
    trainable, total = trainable_counts(model)
    assert trainable == attention + projections
    assert all("lora_" in n for n, p in model.named_parameters() if p.requires_grad)
    assert _lora_block_indices(model, r"clip\.visual\.transformer") == {9, 10, 11}
    assert _lora_block_indices(model, r"clip\.transformer") == {9, 10, 11}
    assert trainable < total / 10
    vision_only = LoraSection(targets=["vision_attention"], layers=[11], r=r)
    model, _, _ = build_lora_clip(cfg.clip, vision_only)
    assert trainable_counts(model)[0] == (r * wv + 3 * wv * r) + (r * wv + wv * r)
    assert _lora_block_indices(model, r"clip\.transformer") == set()
    with pytest.raises(ValueError):
        build_lora_clip(cfg.clip, LoraSection(layers=[12]))


def test_tiny_run_lowers_loss_and_keeps_the_base_frozen(tiny_lora_cfg, irfl_folder):
    cfg = tiny_lora_cfg
    torch.manual_seed(cfg.optim.seed)
    base, _, _ = build_lora_clip(cfg.clip, cfg.lora)
    frozen = {n: p.detach().clone() for n, p in base.named_parameters() if "lora_" not in n}
    result = train_lora_clip(cfg)
    assert result.loss_after < result.loss_before * 0.9, (result.loss_before, result.loss_after)
    assert len(result.epoch_loss) == cfg.optim.epochs and result.n_triples == 6  # 6 train rows, top_k 1
    model, preprocess, tokenizer = load_lora_clip(result.adapter_dir)
    drift = {}
    for name, p in model.named_parameters():  # the saved run rebuilt: base weights as built
        if "lora_" not in name:
            assert not p.requires_grad, name
            drift[name] = float((p - frozen[name]).abs().max())
    # PEFT's MultiheadAttention LoRA adds the update to in_proj/out_proj for each forward and
    # subtracts it after: only float rounding moves those; every other base weight is bit-equal.
    assert all(v == 0.0 for n, v in drift.items() if ".attn." not in n)
    assert 0.0 <= max(drift.values()) < 1e-6, max(drift.values())
    history = json.loads((result.adapter_dir.parent / "history.json").read_text())
    assert history["loss_after"] == pytest.approx(result.loss_after)
    # The loaded adapter scores like the trained model did (its eval-mode loss is loss_after) and
    # unlike the base model; mining used the base model (adapters disabled).
    task = read_irfl(cfg.data.train_csv, cfg.data.images_dir, split="train")
    tuned = text_image_scores(model, preprocess, tokenizer, task.image_paths, task.phrases)
    with model.disable_adapter():
        base_sim = text_image_scores(model, preprocess, tokenizer, task.image_paths, task.phrases)
    assert not np.allclose(tuned, base_sim, atol=1e-4)
    before, after = figurative_metrics(task, base_sim), figurative_metrics(task, tuned)
    assert after["margin"] > before["margin"]
    mined = mine_hard_negatives(task, base_sim, top_k=1)
    assert history["triples"] == {
        "row": mined.row.tolist(),
        "fig": mined.fig.tolist(),
        "lit": mined.lit.tolist(),
    }
    print(f"\nLoRA-CLIP tiny: L_dev {result.loss_before:.4f} -> {result.loss_after:.4f}; trainable "
          f"{result.n_trainable}/{result.n_total}; margin {before['margin']:+.4f} -> {after['margin']:+.4f}; "
          f"max base drift {max(drift.values()):.2e}")  # fmt: skip
