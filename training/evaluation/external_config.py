"""The `external` section of EvalConfig: benchmarks read beside the Lenses split (ArtEmis, IRFL,
COCO and Flickr30K in the Karpathy split). Kept apart so config.py stays one screenful per topic."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


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
