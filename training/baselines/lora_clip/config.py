"""LoraClipConfig: one LoRA-CLIP run (YAML in training/configs/lora-clip-*.yaml).

The seed (004, Sec. 4.3 and Table 6) gives: CLIP ViT-B/32, PEFT LoRA on attention and projection
layers 9-11 of both towers, 10 epochs, lr 1e-5, base parameters frozen. It does not give the LoRA
rank and alpha, tau of L_dev, the optimiser, batch size or how many negatives per triple;
the defaults for those are ours and marked "not in the seed".
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from lenses_data.merge import deep_merge

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"  # training/configs

Target = Literal["vision_attention", "text_attention", "vision_projection", "text_projection"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ClipSection(_Section):
    model_name: str = Field(
        default="ViT-B-32-quickgelu", description="open_clip name (OpenAI weights use QuickGELU)"
    )
    pretrained: str | None = Field(
        default=None, description="Local open_clip checkpoint file; None = random weights (tests only)"
    )
    model_config_path: str | None = Field(default=None, description="JSON architecture file (tiny tests)")


class LoraSection(_Section):
    targets: list[Target] = Field(
        default=["vision_attention", "text_attention", "vision_projection", "text_projection"],
        min_length=1,
        description="Seed Table 6, best row: (text + vision) attention + (text + vision) projection",
    )
    layers: list[int] = Field(default=[9, 10, 11], min_length=1, description="Residual blocks adapted")
    r: int = Field(default=8, description="not in the seed")
    alpha: int = Field(default=16, description="not in the seed (PEFT scales the update by alpha / r)")
    dropout: float = Field(default=0.0, description="not in the seed")


class DataSection(_Section):
    train_csv: str = Field(description="IRFL detection-task CSV holding the training rows")
    images_dir: str
    split: str | None = Field(default="train", description="Rows whose `split` column matches; None = all")
    on_missing: Literal["error", "skip"] = "error"


class MiningSection(_Section):
    pool: Literal["phrase", "all"] = Field(default="phrase", description="not in the seed (mining.py)")
    top_k: int = Field(
        default=1, ge=1, description="negatives per (phrase, figurative image); not in the seed"
    )


class OptimSection(_Section):
    epochs: int = 10
    lr: float = 1.0e-5
    weight_decay: float = Field(default=0.0, description="AdamW; not in the seed")
    batch_size: int = Field(default=32, description="triples per step; not in the seed")
    tau: float = Field(default=0.07, gt=0, description="L_dev temperature; not in the seed")
    seed: int = 0


class RunSection(_Section):
    out_dir: str = "runs/lora-clip"
    device: str = "cpu"
    encode_batch_size: int = 64


class LoraClipConfig(_Section):
    clip: ClipSection = Field(default_factory=ClipSection)
    lora: LoraSection = Field(default_factory=LoraSection)
    data: DataSection
    mining: MiningSection = Field(default_factory=MiningSection)
    optim: OptimSection = Field(default_factory=OptimSection)
    run: RunSection = Field(default_factory=RunSection)


def load_lora_clip_config(path: str | Path, overrides: dict | None = None) -> LoraClipConfig:
    """Read a YAML LoraClipConfig; a bare name such as "lora-clip-tiny" resolves to training/configs/."""
    p = Path(path)
    if not p.exists() and (CONFIG_DIR / f"{path}.yaml").exists():
        p = CONFIG_DIR / f"{path}.yaml"
    if not p.exists():
        raise FileNotFoundError(f"LoRA-CLIP config not found: {path}")
    raw = yaml.safe_load(p.read_text()) or {}
    return LoraClipConfig.model_validate(deep_merge(raw, overrides or {}))
