"""TrainConfig: the one schema for a training run (YAML in training/configs/*.yaml).

Defaults are the paper's hyperparameters (supplementary Sec. 7) where it gives them; values it
does not give (tau_s, the diversity margin, warmup, LoRA target modules) are marked below and in
docs/training.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from lenses_data.merge import deep_merge
from training.retriever.lenses import lens_index

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"  # training/configs

# LoRA only inside the language model: the CLIP tower also has q_proj/k_proj/v_proj modules,
# so plain suffix matching would adapt the (frozen) vision encoder too. peft full-matches this.
LANGUAGE_MODEL_LORA_REGEX = r".*language_model\.layers\.\d+\.(self_attn\.(q_proj|k_proj|v_proj|o_proj)|mlp\.(gate_proj|up_proj|down_proj))"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TinyModelConfig(_Section):
    """Random-weight LLaVA-Next for tests and dry runs (built in code, never downloaded)."""

    text_hidden: int = 64
    text_layers: int = 2
    text_heads: int = 4
    text_kv_heads: int = 2
    vision_hidden: int = 32
    vision_layers: int = 2
    vision_image_size: int = 32
    patch_size: int = 8
    vocab_size: int = 1000
    seed: int = 0


class ModelConfig(_Section):
    source: Literal["local", "tiny"] = "local"
    path: str | None = Field(
        default=None, description="Local directory of BAAI/BGE-VL-MLLM-S1 (source=local)"
    )
    tiny: TinyModelConfig = Field(default_factory=TinyModelConfig)
    noise_sigma: float = Field(
        default=0.1, description="New-token init noise; per-coordinate std = sigma/sqrt(d)"
    )
    attn_implementation: str | None = Field(
        default=None, description="e.g. sdpa or flash_attention_2; None = default"
    )


class LoraSection(_Section):
    r: int = 16
    alpha: int = 32
    dropout: float = 0.1
    target_regex: str = Field(
        default=LANGUAGE_MODEL_LORA_REGEX, description="Not in the paper: all LM projections"
    )


class DataConfig(_Section):
    export_dir: str = "runs/export"
    split: str = "train"
    image_size: int = 512
    images_per_batch: int = Field(default=20, description="Micro-batch per GPU, in images (paper: 20)")
    captions_per_image: int = Field(
        default=2, description="Captions sampled per image per batch (all positives)"
    )
    max_caption_tokens: int = 256
    max_image_tokens: int = 3500
    max_prompts_per_image: int = 16
    prompt_density: Literal["all", "top1", "none"] = Field(
        default="all",
        description="Prompts per image input (supp. Table 5): all (z>1), top1 per lens (z=1), none (z=0)",
    )
    lenses: list[str] | None = Field(
        default=None,
        description="Lens-restricted training (Lenses-Literal/-Emotional): keep only captions and "
        "prompts of these lenses; None = all five",
    )
    fraction: float = Field(
        default=1.0, gt=0.0, le=1.0, description="Seeded share of the split's images (supp. Table 8: 0.2)"
    )
    num_workers: int = 4
    image_task: str = "Represent this image under each of the following lens prompts."
    caption_task: str = "Represent this caption under each of the five lenses."
    instruct_marker: str = "<instruct>"

    @field_validator("lenses")
    @classmethod
    def _known_lenses(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            if not value:
                raise ValueError("data.lenses must name at least one lens (or be null for all)")
            for name in value:
                lens_index(name)  # clear error for an unknown lens
        return value


# Eq. 4's smooth-Chamfer temperature and denominator, supp. Sec. 7: "a temperature of alpha = 16.0
# and a denominator of 2.0 for the smooth Chamfer similarity module". The one place they are
# written: training's LossConfig, evaluation's ScoringSection and every scorer's defaults.
SMOOTH_CHAMFER_ALPHA = 16.0
SMOOTH_CHAMFER_DENOMINATOR = 2.0


class LossConfig(_Section):
    mode: Literal["lens", "global"] = Field(default="lens", description="global = fine-tuned BGE-VL baseline")
    tau: float = 0.07
    alpha: float = SMOOTH_CHAMFER_ALPHA
    denominator: float = SMOOTH_CHAMFER_DENOMINATOR
    fallback: bool = True
    tau_s: float = Field(default=0.07, description="Not given in the paper; set equal to tau")
    div_margin: float = Field(default=0.5, description="Not given in the paper (alpha in [0, 1] of Eq. 9)")
    lambda_slot: float = 0.05
    lambda_div: float = 0.01
    slot_pairs: Literal["all", "positive"] = Field(
        default="all",
        description="S+ of Eq. 8: all = every (b, n) pair of the batch with a same-lens slot (the "
        "paper's definition); positive = matched pairs only",
    )


class OptimConfig(_Section):
    lr: float = 5e-5
    min_lr: float = 1e-6
    warmup_steps: int = 0
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float = 1.0
    accum_steps: int = 4
    max_steps: int = 10_000
    recipe_gpus: int = Field(
        default=8,
        ge=1,
        description="GPUs the recipe is written for (paper: 8); its global batch is images_per_batch x "
        "accum_steps x recipe_gpus images per optimizer step, which `lenses train --rehearse --gpus G` "
        "keeps by changing the accumulation",
    )


class RunConfig(_Section):
    out_dir: str = "runs/train"
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    gradient_checkpointing: bool | None = Field(default=None, description="None = on when running on GPU")
    log_every: int = 10
    save_every: int = 500
    keep_last: int = 2
    resume: bool = True


class SpeedConfig(_Section):
    """Training-step speed levers (training.retriever.speed). Off = the measured baseline step;
    each lever keeps the recipe (same loss and gradients, tested at tiny size on the CPU)."""

    vision_no_grad: bool = Field(
        default=False,
        description="Run the frozen CLIP tower without an autograd graph (with checkpointing on, "
        "peft's input-grad hook otherwise makes it recompute and backpropagate the whole tower)",
    )
    lora_no_input_cast: bool = Field(
        default=False,
        description="Under bf16 autocast, feed LoRA branches their bf16 input instead of peft's "
        "fp32 copy (autocast casts it back to bf16 for the matmul anyway)",
    )
    checkpoint_skip_last: int = Field(
        default=0, ge=0, description="Last N decoder layers run without activation checkpointing"
    )
    length_chunks: int = Field(
        default=1,
        ge=1,
        description="Each encoder forward in this many length-sorted sub-batches, each padded only "
        "to its own longest row (the loss still sees the whole micro-batch)",
    )
    compile_layers: bool = Field(default=False, description="torch.compile each decoder layer")
    compile_backend: str = Field(default="inductor", description="torch.compile backend for compile_layers")


class TrainConfig(_Section):
    model: ModelConfig = Field(default_factory=ModelConfig)
    lora: LoraSection = Field(default_factory=LoraSection)
    data: DataConfig = Field(default_factory=DataConfig)
    loss: LossConfig = Field(default_factory=LossConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    run: RunConfig = Field(default_factory=RunConfig)
    speed: SpeedConfig = Field(default_factory=SpeedConfig)


def _resolve(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists() and (CONFIG_DIR / f"{path}.yaml").exists():
        p = CONFIG_DIR / f"{path}.yaml"
    if not p.exists():
        raise FileNotFoundError(f"training config not found: {path}")
    return p


def _read_raw(path: str | Path, seen: tuple[Path, ...] = ()) -> dict:
    """A YAML config with its `extends: <config>` chain merged in (the named base first).

    `extends` is a path or a bare name under training/configs/ (the ablation configs in
    training/configs/ablations/ extend the paper recipe and change only what they ablate).
    """
    p = _resolve(path).resolve()
    if p in seen:
        raise ValueError(f"training config extends itself: {' -> '.join(map(str, (*seen, p)))}")
    raw = yaml.safe_load(p.read_text()) or {}
    base = raw.pop("extends", None)
    return deep_merge(_read_raw(base, (*seen, p)), raw) if base is not None else raw


def load_train_config(path: str | Path, overrides: dict | None = None) -> TrainConfig:
    """Read a YAML TrainConfig; `overrides` is a nested dict merged on top (e.g. from the CLI).

    A bare name such as "tiny" or "ablations/loss-ret" resolves to training/configs/<name>.yaml.
    """
    return TrainConfig.model_validate(deep_merge(_read_raw(path), overrides or {}))
