"""Dedupe and split settings.

Thresholds are validated here, so a bad value is a config error that names the field (e.g.
`dedupe.leakage_threshold`), never a surprise in the middle of a run.
The default `hamming_radius` comes from `lenses dedupe --calibrate` on the sample pool: see
docs/components/dedupe.md for the numbers and the rule.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from lenses_data.config.frozen import FrozenModel
from lenses_data.config.paper import TABLE1

# Table 1 of the paper: 105,669 images, valid 1,100, test 5,500 (train 99,069).
TABLE1_IMAGES = TABLE1["total"]["images"]
TABLE1_VALID = TABLE1["valid"]["images"]
TABLE1_TEST = TABLE1["test"]["images"]
# Default CLIP batch sizes: a GPU needs large batches to be busy (256: ~1,800 images/s for ViT-L-14
# in bf16 on an H100 or H200, issue 31); the CPU keeps the old 64.
CLIP_BATCH_CUDA = 256
CLIP_BATCH_CPU = 64


class DedupeConfig(FrozenModel):
    hash_kind: Literal["phash", "dhash", "whash"] = Field("phash", description="imagehash function")
    hamming_radius: int = Field(
        8, ge=0, le=24, description="Max Hamming distance (bits of 64) for a removal pair (calibrated)"
    )
    leakage_hamming_radius: int | None = Field(
        None, ge=0, le=24, description="Hash pairs up to this distance share a split; None: = hamming_radius"
    )
    hash_workers: int = Field(
        1, ge=1, description="Processes for hashing images on demand (only rows ingest stored no hashes for)"
    )
    crop_signal: bool = Field(
        True, description="Merge crops/rescales: aligned centre-crop pHashes confirmed by dHash (no weights)"
    )
    crop_radius: int = Field(8, ge=0, le=12, description="Max aligned pHash distance of a crop candidate")
    crop_confirm_radius: int = Field(
        14, ge=0, le=32, description="Max dHash distance, at the same alignment, that confirms a crop pair"
    )
    hash_flat_max: int = Field(20_000, ge=0, description="Below this many images an exact faiss flat search")
    clip_model: str | None = Field("ViT-B-32", description="open_clip architecture name; None turns CLIP off")
    clip_model_config: str | None = Field(None, description="Local open_clip model JSON config to register")
    clip_checkpoint: str | None = Field(
        None, description="Local checkpoint file; None turns the CLIP signal off"
    )
    clip_random_weights: bool = Field(
        False, description="TESTS ONLY: random-weight model to exercise the mechanics; never for real runs"
    )
    clip_quick_gelu: bool | None = Field(
        None,
        description="QuickGELU activation (OpenAI's weights need it); None: decided from the model name "
        "and the checkpoint (OpenAI's file format or metadata, open_clip_config.json, 'openai' in its name)",
    )
    clip_device: str = Field("auto", description="auto, cpu, cuda, cuda:1, ...")
    clip_precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="auto: bf16 autocast on CUDA, fp32 on the CPU; bf16 on the CPU is allowed"
    )
    clip_batch_size: int | None = Field(
        None,
        ge=1,
        description=f"Images per encoder call; None: {CLIP_BATCH_CUDA} on CUDA, {CLIP_BATCH_CPU} on the CPU",
    )
    clip_decode_workers: int = Field(
        0,
        ge=0,
        description="Threads decoding and preprocessing images for CLIP; 0: one per CPU core (max 32)",
    )
    clip_jpeg_draft: bool = Field(
        True, description="Decode JPEGs at the largest DCT reduction that keeps >= the model's input size"
    )
    clip_threshold: float = Field(
        0.95, gt=0.0, le=1.0, description="Cosine at/above which images are duplicates"
    )
    leakage_threshold: float = Field(
        0.90, gt=0.0, le=1.0, description="Cosine at/above which images share a split"
    )
    clip_index: Literal["auto", "flat", "hnsw", "ivf"] = Field(
        "auto", description="auto: flat up to clip_exact_max"
    )
    clip_exact_max: int = Field(50_000, ge=1, description="Largest set searched with the exact flat index")
    clip_k: int = Field(16, ge=1, description="Neighbours per image kept by the approximate indexes")
    hnsw_m: int = Field(32, ge=4)
    hnsw_ef_construction: int = Field(64, ge=8)
    hnsw_ef_search: int = Field(
        128, ge=8, description="efSearch: 32 gave 0.85 planted recall at 1M, 128 gave 0.99"
    )
    ivf_nlist: int = Field(0, ge=0, description="IVF lists; 0: 4*sqrt(n)")
    ivf_nprobe: int = Field(16, ge=1)
    recall_sample: int = Field(
        1000, ge=1, description="Queries used to check approximate recall against exact"
    )
    n_clusters: int = Field(0, ge=0, description="faiss k-means clusters of the embeddings (0: off)")
    seed: int = 0

    @model_validator(mode="after")
    def _ordered_thresholds(self) -> DedupeConfig:
        if self.leakage_threshold > self.clip_threshold:
            raise ValueError(
                f"dedupe.leakage_threshold ({self.leakage_threshold}) must be <= dedupe.clip_threshold "
                f"({self.clip_threshold}): pairs too similar to keep apart must include the removed ones"
            )
        if self.leakage_hamming_radius is not None and self.leakage_hamming_radius < self.hamming_radius:
            raise ValueError(
                f"dedupe.leakage_hamming_radius ({self.leakage_hamming_radius}) must be >= "
                f"dedupe.hamming_radius ({self.hamming_radius})"
            )
        return self

    @property
    def leak_radius(self) -> int:
        return self.hamming_radius if self.leakage_hamming_radius is None else self.leakage_hamming_radius


class SplitConfig(FrozenModel):
    valid: float = Field(
        0.01041, ge=0, description="Fraction (<1) or count (>=1) of images for valid; 0.01041*105669 = 1100"
    )
    test: float = Field(
        0.05205, ge=0, description="Fraction (<1) or count (>=1) of images for test; 0.05205*105669 = 5500"
    )
    seed: str = "lenses-v1"
    input_stage: Literal["auto", "filter", "dedupe"] = Field(
        "auto", description="auto: filter-passed survivors if RUN/filter is complete, else dedupe survivors"
    )

    @model_validator(mode="after")
    def _sizes(self) -> SplitConfig:
        for name in ("valid", "test"):
            value = getattr(self, name)
            if value >= 1 and value != int(value):
                raise ValueError(f"split.{name} ({value}) must be a fraction < 1 or a whole count")
        if self.valid < 1 and self.test < 1 and self.valid + self.test >= 1:
            raise ValueError(f"split.valid + split.test ({self.valid + self.test}) must leave room for train")
        return self

    def sizes(self, n: int) -> tuple[int, int]:
        """(valid, test) image counts for n images."""

        def count(value: float) -> int:
            return int(value) if value >= 1 else round(value * n)

        valid, test = count(self.valid), count(self.test)
        if valid + test > n:
            raise ValueError(f"split.valid + split.test ({valid} + {test}) exceed the {n} images to split")
        return valid, test


# What the production config sets: Table 1's exact counts.
PRODUCTION_SPLIT = SplitConfig(valid=TABLE1_VALID, test=TABLE1_TEST)
