"""EvalConfig: the one schema of an evaluation run (YAML in training/configs/eval-*.yaml)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from lenses_data.merge import deep_merge
from training.baselines.clip_finetune_config import ClipFinetuneSection
from training.evaluation.external_config import ExternalSection, IrflFusionSection
from training.retriever.config import SMOOTH_CHAMFER_ALPHA, SMOOTH_CHAMFER_DENOMINATOR

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"  # training/configs


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScoringSection(_Section):
    alpha: float = Field(
        default=SMOOTH_CHAMFER_ALPHA, description="Smooth-Chamfer temperature (supp. Sec. 7)"
    )
    denominator: float = SMOOTH_CHAMFER_DENOMINATOR
    fallback: bool = True
    text_slots: Literal["all", "label"] = Field(
        default="all", description="all = inference (five lens slots, no label); label = caption's lens only"
    )
    image_chunk: int = 256
    text_chunk: int = 8192


class MetricsSection(_Section):
    ks: tuple[int, ...] = (1, 5, 10)
    protocols: tuple[Literal["lens_slot", "lens_gallery", "full_gallery"], ...] = Field(
        default=("lens_slot", "lens_gallery", "full_gallery"),
        min_length=1,
        description="Per-lens R@K protocols (docs/evaluation.md); lens_slot = main paper Sec. 4.2, lens model only",
    )
    lens_slot_gallery: Literal["label", "active"] = Field(
        default="label",
        description="lens_slot I->T gallery: label = the lens-c captions (the paper's text mask, Table 2); "
        "active = captions whose c slot is on under scoring.text_slots",
    )
    max_chunk_bytes: int = 256 * 2**20


class OpenClipSection(_Section):
    enabled: bool = False
    model_name: str = "ViT-B-32"
    pretrained: str | None = Field(default=None, description="Local checkpoint file; None = random weights")
    model_config_path: str | None = Field(
        default=None, description="JSON architecture file (e.g. a tiny test model)"
    )
    batch_size: int = 64
    device: str = "cpu"
    row: Literal["CLIP", "OpenCLIP"] | None = Field(
        default="OpenCLIP",
        description="Paper row of main Tables 2 and 5 this model fills when no baselines.zero_shot entry "
        "names that row: OpenCLIP (LAION weights), CLIP (OpenAI weights), null = none",
    )


class LoraClipSection(_Section):
    """A trained LoRA-CLIP adapter (seed 004; `lenses train-lora-clip`), scored on IRFL."""

    adapter_dir: str | None = Field(default=None, description="<run.out_dir>/adapter; None = row unavailable")
    pretrained: str | None = Field(
        default=None, description="Base checkpoint file if it moved since training (None = as recorded)"
    )
    batch_size: int = 64
    device: str = "cpu"


ZeroShotFamily = Literal[
    "open_clip", "blip2", "hf_clip", "bge_vl_mllm", "jina_v4", "altclip", "align", "groupvit", "blip", "flava",
    "imagebind", "vlm2vec_llava_next", "vlm2vec_phi3",
]  # fmt: skip
_LOCAL_DIR_FAMILIES = ("blip2", "hf_clip", "bge_vl_mllm", "jina_v4", "altclip", "align", "groupvit", "blip",
                       "flava", "vlm2vec_llava_next")  # fmt: skip


class ZeroShotSection(_Section):
    """One zero-shot row of main Tables 2 and 5 (training/evaluation/scoring/zero_shot.py)."""

    row: str = Field(description="Row label, e.g. BLIP-2, BGE-VL-Large, CoCa (the papers' names)")
    family: ZeroShotFamily
    path: str | None = Field(
        default=None,
        description="Local model directory (every family but open_clip); open_clip: checkpoint file or "
        "null for random weights",
    )
    model_name: str = Field(default="ViT-B-32", description="open_clip architecture name")
    model_config_path: str | None = Field(default=None, description="open_clip JSON architecture file")
    train_config: str = Field(
        default="h200x8", description="bge_vl_mllm: training config whose data section (inputs) is used"
    )
    max_text_tokens: int | None = Field(default=None, description="None = the family's default")
    batch_size: int = 32
    device: str = "cpu"

    @model_validator(mode="after")
    def _needs_path(self) -> ZeroShotSection:
        if self.family in _LOCAL_DIR_FAMILIES and not self.path:
            raise ValueError(
                f"zero-shot row {self.row!r} ({self.family}) needs path: a local model directory"
            )
        if self.family == "imagebind" and not self.model_config_path and self.model_name != "ViT-H-14":
            raise ValueError(
                f"zero-shot row {self.row!r} (imagebind) is OpenCLIP ViT-H-14: set model_name: ViT-H-14"
            )
        return self


class BaselinesSection(_Section):
    open_clip: OpenClipSection = Field(default_factory=OpenClipSection)
    clip_finetune: ClipFinetuneSection = Field(default_factory=ClipFinetuneSection)
    zero_shot: list[ZeroShotSection] = Field(default_factory=list)
    global_only_checkpoint: str | None = Field(
        default=None, description="Checkpoint of the global-only fine-tuned model (its ArtEmis row)"
    )
    lora_clip: LoraClipSection = Field(default_factory=LoraClipSection)
    irfl_fusion: IrflFusionSection = Field(default_factory=IrflFusionSection)  # seed 004's ensemble, MLP
    global_only_encodings: str | None = Field(
        default=None, description="Encodings dir of a global-only fine-tuned model (scored by global cosine)"
    )
    similarity_ablations: bool = True
    text_only: bool = True


class ImpModelSection(_Section):
    """One open_clip model of the IMP difficulty ensemble, from local files only."""

    name: str = Field(description="Label in the difficulty table, thresholds.json and logs")
    model_name: str = "ViT-B-32"
    model_config_path: str | None = Field(default=None, description="JSON architecture file")
    pretrained: str | None = Field(
        default=None, description="Local open_clip checkpoint file; None = random weights (tests only)"
    )
    role: Literal["voter", "tie_breaker"] = "voter"
    threshold: float | None = Field(
        default=None, description="Fixed threshold (skips calibration), e.g. the paper's ViT-B/32 0.26"
    )


class ImpCalibrationSection(_Section):
    table: str = Field(description="CSV or Parquet of image-text pairs: columns image, text, optional label")
    image_root: str | None = Field(
        default=None, description="Base of relative image paths (default: table's folder)"
    )
    batch_size: int = Field(
        default=256, description="Without a label column: rows in batches, off-diagonal pairs are negatives"
    )


class ImpSection(_Section):
    """IMP (seed 003) difficulty split of the evaluated split's true pairs, and its metrics."""

    difficulty_table: str | None = Field(
        default=None, description="Parquet from `lenses imp-split`; None = compute with `models`"
    )
    models: list[ImpModelSection] = Field(default_factory=list)
    calibration: ImpCalibrationSection | None = None
    batch_size: int = 64
    device: str = "cpu"
    negatives: Literal["discarded", "visual_discarded", "shifted"] = Field(
        default="discarded",
        description="AUPRC negatives: discarded = a text of the same image the validators discarded "
        "(shifted where an image has none); visual_discarded = the same with the visual validator's "
        "discards only; shifted = the next image's first caption for every image",
    )
    table2_models: Literal["split", "zero_shot"] = Field(
        default="split",
        description="IMP Table 2 averages the AUPRC of: split = the models of `models` (IMP's seven: "
        "six voters and the tie-breaker); zero_shot = the baselines.zero_shot rows",
    )
    build_run: str | None = Field(
        default=None,
        description="Build run folder whose generate stage holds the discarded texts; None = the "
        "export folder's parent (`lenses run` writes RUN/export)",
    )

    @model_validator(mode="after")
    def _check_models(self) -> ImpSection:
        if self.difficulty_table is None and not any(m.role == "voter" for m in self.models):
            raise ValueError("imp needs difficulty_table or at least one voter in models")
        if sum(m.role == "tie_breaker" for m in self.models) > 1:
            raise ValueError("imp allows at most one tie_breaker model")
        if len({m.name for m in self.models}) < len(self.models):
            raise ValueError("imp model names must be unique")
        if self.calibration is None and any(m.threshold is None for m in self.models):
            raise ValueError("imp models without a fixed threshold need a calibration table")
        return self


VariantRole = Literal[
    "loss_ret", "loss_ret_slot", "lenses_literal", "lenses_emotional", "density_z0", "density_z1"
]


class VariantSection(_Section):
    """Another trained lens model (an ablation run), scored like the main one for its paper row:
    main Table 3a (loss_ret*), Table 5 (lenses_*), supp. Table 5 (density_*); see paper_tables.py."""

    role: VariantRole
    encodings_dir: str | None = Field(
        default=None, description="`lenses encode` folder of the evaluated split"
    )
    checkpoint: str | None = Field(
        default=None, description="Checkpoint (encoded here when no encodings_dir; needed for ArtEmis)"
    )

    @model_validator(mode="after")
    def _has_source(self) -> VariantSection:
        if not (self.encodings_dir or self.checkpoint):
            raise ValueError(f"variant {self.role!r} needs encodings_dir or checkpoint")
        return self


class SwapSection(_Section):
    """One row (backbone_scaling) or block (generator_swap): the evaluated split with its image-side
    prompts or its captions taken from another build of the dataset (docs/evaluation.md)."""

    row: str = Field(description="The generator's name in the table, e.g. InternVL3.5-4B")
    export_dir: str | None = Field(
        default=None,
        description="`lenses export` of a build whose models.generator.model is that generator; "
        "None = the evaluated export itself (the rows of the main evaluation)",
    )


def _unique_rows(entries: list[SwapSection], key: str) -> None:
    rows = [e.row for e in entries]
    if len(set(rows)) < len(rows):
        raise ValueError(f"{key}: each row at most once, got {rows}")


class EvalConfig(_Section):
    export_dir: str = Field(default="runs/export", description="`lenses export` folder")
    split: Literal["train", "valid", "test"] = "test"
    encodings_dir: str | None = Field(default=None, description="`lenses encode` output of the lens model")
    train_config: str | None = Field(default=None, description="Training config used to encode when needed")
    checkpoint: str | None = Field(
        default=None, description="Checkpoint to encode with (None = latest/untrained)"
    )
    out_dir: str = "runs/eval"
    scoring: ScoringSection = Field(default_factory=ScoringSection)
    metrics: MetricsSection = Field(default_factory=MetricsSection)
    baselines: BaselinesSection = Field(default_factory=BaselinesSection)
    external: ExternalSection = Field(default_factory=ExternalSection)
    routing: bool = True
    imp: ImpSection | None = None
    variants: list[VariantSection] = Field(default_factory=list)
    backbone_scaling: list[SwapSection] = Field(
        default_factory=list, description="Main Table 6 / supp. Table 7: image-side prompts by generator"
    )
    generator_swap: list[SwapSection] = Field(
        default_factory=list, description="Supp. Table 6: captions by generator"
    )

    @model_validator(mode="after")
    def _unique_variants(self) -> EvalConfig:
        roles = [v.role for v in self.variants]
        if len(set(roles)) < len(roles):
            raise ValueError(f"variants: each role at most once, got {roles}")
        _unique_rows(self.backbone_scaling, "backbone_scaling")
        _unique_rows(self.generator_swap, "generator_swap")
        return self


def load_eval_config(path: str | Path, overrides: dict | None = None) -> EvalConfig:
    """Read a YAML EvalConfig; a bare name such as "eval-tiny" resolves to training/configs/."""
    p = Path(path)
    if not p.exists() and (CONFIG_DIR / f"{path}.yaml").exists():
        p = CONFIG_DIR / f"{path}.yaml"
    if not p.exists():
        raise FileNotFoundError(f"evaluation config not found: {path}")
    raw = yaml.safe_load(p.read_text()) or {}
    return EvalConfig.model_validate(deep_merge(raw, overrides or {}))
