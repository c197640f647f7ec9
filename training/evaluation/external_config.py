"""The config sections of the evaluation on external sets: `external` (ArtEmis, IRFL, COCO and
Flickr30K in the Karpathy split, read beside the Lenses split) and `baselines.irfl_fusion` (seed
004's weighted CLIP ensemble and supervised MLP on IRFL, its Tables 2 and 3; the scorer is
`training.evaluation.external.irfl_fusion`, the pure parts `training.baselines.clip_fusion`).
EvalConfig (config.py) holds them as it holds its other sections.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _ExternalSection(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt key is an error, as in the rest of EvalConfig


class ArtemisSection(_ExternalSection):
    csv: str
    wikiart_dir: str
    prompts: str | None = Field(
        default=None,
        description="Optional image-side prompts for the lens models: CSV/Parquet with art_style, "
        "painting, lens, text (ArtEmis has none; without them every pair uses the global fallback)",
    )
    split: str | None = None
    on_missing: Literal["error", "skip"] = "error"


class IrflSection(_ExternalSection):
    csv: str
    images_dir: str
    split: str | None = Field(default=None, description="Rows whose `split` column matches; None = all")
    on_missing: Literal["error", "skip"] = "error"


class KarpathySection(_ExternalSection):
    """A Karpathy-split caption file (COCO or Flickr30K) for supp. Tables 1-2 (training/external/karpathy.py)."""

    captions_json: str = Field(description="dataset_coco.json or dataset_flickr30k.json")
    images_dir: str = Field(description="Folder of the images (COCO: holding train2014/ and val2014/)")
    split: Literal["train", "val", "test", "restval"] = "test"
    captions_per_image: int | None = Field(
        default=5, ge=1, description="Keep the first N captions of an image (the standard 5); None = all"
    )
    prompts: str | None = Field(
        default=None,
        description="Optional image-side prompts for the lens model: CSV/Parquet with filename, lens, text "
        "(without them every pair uses the global fallback)",
    )
    on_missing: Literal["error", "skip"] = "error"


class ExternalSection(_ExternalSection):
    artemis: ArtemisSection | None = None
    irfl: list[IrflSection] = Field(default_factory=list)
    coco: KarpathySection | None = Field(default=None, description="supp. Table 1")
    flickr30k: KarpathySection | None = Field(default=None, description="supp. Table 2")


# --- baselines.irfl_fusion ---


class FusionMemberSection(_ExternalSection):
    """One CLIP variant of the ensemble (seed 004: ViT-B/32, ViT-B/16, RN50, RN50x64), open_clip from local files."""

    name: str = Field(description="Column name, e.g. B/32")
    model_name: str = "ViT-B-32"
    pretrained: str | None = Field(default=None, description="Local checkpoint file; None = random weights")
    model_config_path: str | None = Field(
        default=None, description="JSON architecture file (tiny test models)"
    )


class MlpSection(_ExternalSection):
    hidden: tuple[int, int] = (512, 256)
    lr: float = Field(default=1e-4, description="Adam learning rate (seed 004 Sec. 4)")
    batch_size: int = 64
    max_epochs: int = 200
    patience: int = Field(
        default=10, description="Early stopping: epochs without a better validation accuracy"
    )
    seed: int = 0


class IrflFusionSection(_ExternalSection):
    members: list[FusionMemberSection] = Field(
        default_factory=list, description="Empty = both rows unavailable"
    )
    valid: list[IrflSection] = Field(
        default_factory=list,
        description="IRFL rows the ensemble weights are tuned on and the MLP is early-stopped on "
        "(e.g. the `split: valid` rows); must not overlap the evaluated external.irfl rows",
    )
    train: list[IrflSection] = Field(
        default_factory=list, description="IRFL rows the MLP is trained on; empty = MLP row unavailable"
    )
    weights: list[float] | None = Field(
        default=None, description="Fixed ensemble weights, one per member; None = tuned on `valid`"
    )
    grid_step: float = Field(default=0.1, gt=0, le=1, description="Weight grid step (seed 004 Table 2: 0.1)")
    mlp: MlpSection = Field(default_factory=MlpSection)
    batch_size: int = 64
    device: str = "cpu"

    @model_validator(mode="after")
    def _one_weight_per_member(self) -> IrflFusionSection:
        if self.weights is not None and len(self.weights) != len(self.members):
            raise ValueError(
                f"irfl_fusion.weights has {len(self.weights)} entries for {len(self.members)} members"
            )
        return self
