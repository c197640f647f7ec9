"""`baselines.irfl_fusion`: seed 004's weighted CLIP ensemble and supervised MLP on IRFL (its Tables 2, 3).

Kept apart from config.py like the `external` section; the scorer is
`training.evaluation.external.irfl_fusion`, the pure parts `training.baselines.clip_fusion`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from training.evaluation.external_config import IrflSection


class _FusionSection(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FusionMemberSection(_FusionSection):
    """One CLIP variant of the ensemble (seed 004: ViT-B/32, ViT-B/16, RN50, RN50x64), open_clip from local files."""

    name: str = Field(description="Column name, e.g. B/32")
    model_name: str = "ViT-B-32"
    pretrained: str | None = Field(default=None, description="Local checkpoint file; None = random weights")
    model_config_path: str | None = Field(
        default=None, description="JSON architecture file (tiny test models)"
    )


class MlpSection(_FusionSection):
    hidden: tuple[int, int] = (512, 256)
    lr: float = Field(default=1e-4, description="Adam learning rate (seed 004 Sec. 4)")
    batch_size: int = 64
    max_epochs: int = 200
    patience: int = Field(
        default=10, description="Early stopping: epochs without a better validation accuracy"
    )
    seed: int = 0


class IrflFusionSection(_FusionSection):
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
