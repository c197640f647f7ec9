"""The `baselines.clip_finetune` section of the EvalConfig (kept apart from the training code, which
imports torch, so that reading a config does not)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ClipFinetuneSection(BaseModel):
    """Supp. Table 9's "CLIP fine-tuned on Lenses" (training/baselines/clip_finetune.py).

    The supplement gives no CLIP-specific recipe; the defaults are the fine-tuned baseline's of
    supp. Sec. 7 (AdamW, cosine 5e-5 -> 1e-6, weight decay 0.01, grad norm 1.0, multi-positive
    contrastive loss at tau 0.07, ~10,000 steps of 640 examples). Which weights are trained is
    not stated: all of them here.
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    model_name: str = "ViT-B-32"
    model_config_path: str | None = Field(default=None, description="JSON architecture file (tiny tests)")
    pretrained: str | None = Field(default=None, description="Local base checkpoint; None = random weights")
    checkpoint: str | None = Field(
        default=None, description="Fine-tuned weights of an earlier run (skips training); None = train now"
    )
    out_dir: str | None = Field(
        default=None, description="Where training writes; None = <out_dir>/clip_finetune"
    )
    steps: int = Field(default=10_000, ge=1)
    images_per_batch: int = Field(
        default=640, ge=2, description="Images per step, each with all its captions"
    )
    lr: float = 5e-5
    min_lr: float = 1e-6
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    tau: float = Field(default=0.07, gt=0)
    seed: int = 0
    batch_size: int = Field(default=64, description="Encoding batch size at evaluation")
    device: str = "cpu"
