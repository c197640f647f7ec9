"""Training data from an export folder (images.parquet, captions.parquet, prompts.parquet).

A micro-batch is `images_per_batch` images, each with all its image-side prompts (lens-labelled
`<PROMPT>` slots) and `captions_per_image` of its captions, so several captions of one image are
in the batch together (all positives of that image). Batches are a pure function of
(seed, micro-step, rank): resuming at step s replays exactly the batches a run without the
interruption would have seen, with no sampler state to save.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from training.retriever.lenses import lens_index

log = logging.getLogger(__name__)


@dataclass
class ImageRecord:
    image_id: str
    path: str
    prompts: list[tuple[str, int]]  # (prompt text, lens index), sorted by lens then text_id
    captions: list[tuple[str, int]]  # (caption text, lens index)


def read_export(export_dir: str | Path, split: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(images, captions, prompts) rows of one split; clear errors for a missing file or column."""
    root = Path(export_dir)
    frames = []
    for name, cols in (
        ("images", ["image_id", "path", "split"]),
        ("captions", ["text_id", "image_id", "split", "lens", "text"]),
        ("prompts", ["text_id", "image_id", "split", "lens", "text"]),
    ):
        path = root / f"{name}.parquet"
        if not path.exists():
            raise FileNotFoundError(f"export table missing: {path}")
        df = pd.read_parquet(path)
        missing = set(cols) - set(df.columns)
        if missing:
            raise ValueError(f"{path} lacks columns {sorted(missing)}")
        frames.append(df[df["split"].astype(str) == split].reset_index(drop=True))
    return frames[0], frames[1], frames[2]


def _group(df: pd.DataFrame) -> dict[str, list[tuple[str, int]]]:
    out: dict[str, list[tuple[str, int]]] = {}
    if df.empty:
        return out
    df = df.assign(_lens=[lens_index(x) for x in df["lens"].astype(str)]).sort_values(
        ["image_id", "_lens", "text_id"]
    )
    for image_id, text, lens in zip(df["image_id"], df["text"], df["_lens"], strict=True):
        out.setdefault(str(image_id), []).append((str(text), int(lens)))
    return out


def _restrict(df: pd.DataFrame, lenses: Sequence[str] | None) -> pd.DataFrame:
    return df if lenses is None else df[df["lens"].astype(str).isin(set(lenses))]


def subset_images(n: int, fraction: float) -> np.ndarray:
    """Sorted indices of a fixed, seeded `fraction` of n images (at least one). The seed is a
    constant, so every run of a sweep (supp. Table 8: 20% of the data) trains on the same images."""
    if fraction >= 1.0:
        return np.arange(n)
    keep = max(1, round(fraction * n))
    return np.sort(np.random.default_rng(20_000).choice(n, size=keep, replace=False))


def load_records(
    export_dir: str | Path,
    split: str,
    *,
    require_captions: bool = True,
    lenses: Sequence[str] | None = None,
    fraction: float = 1.0,
) -> list[ImageRecord]:
    """One record per image of the split (sorted by image_id), with prompts and captions attached.

    lenses: lens-restricted training (main Table 5's Lenses-Literal / -Emotional): only captions
    and image-side prompts of these lenses are kept. fraction: a fixed share of the images that
    remain (after the caption filter). With `require_captions`, images without any (kept)
    caption cannot be trained on; they are counted and logged, never silently dropped.
    """
    images, captions, prompts = read_export(export_dir, split)
    caps, prs = _group(_restrict(captions, lenses)), _group(_restrict(prompts, lenses))
    records = [
        ImageRecord(str(r.image_id), str(r.path), prs.get(str(r.image_id), []), caps.get(str(r.image_id), []))
        for r in images.sort_values("image_id").itertuples()
    ]
    if require_captions:
        kept = [r for r in records if r.captions]
        if len(kept) < len(records):
            log.warning(
                "%d of %d %s images have no caption%s and are not trained on",
                len(records) - len(kept),
                len(records),
                split,
                "" if lenses is None else f" of lenses {list(lenses)}",
            )
        records = kept
    if fraction < 1.0:
        n = len(records)
        records = [records[i] for i in subset_images(n, fraction)]
        log.info("training on %d of %d %s images (data.fraction=%g)", len(records), n, split, fraction)
    if not records:
        raise ValueError(f"no usable images in split {split!r} of {export_dir}")
    return records


class BatchPlan:
    """Deterministic plan: micro-step -> list of (record index, caption indices) for one rank."""

    def __init__(
        self,
        n_captions: list[int],
        images_per_batch: int,
        captions_per_image: int,
        seed: int,
        rank: int = 0,
        world: int = 1,
    ):
        self.n_captions = n_captions
        self.per_rank = images_per_batch
        self.k = captions_per_image
        self.seed, self.rank, self.world = seed, rank, world
        self.global_batch = images_per_batch * world
        if len(n_captions) < self.global_batch:
            raise ValueError(f"{len(n_captions)} images cannot fill a global batch of {self.global_batch}")
        self.batches_per_epoch = (
            len(n_captions) // self.global_batch
        )  # the ragged tail waits for the next epoch

    def micro_batch(self, micro_step: int) -> list[tuple[int, list[int]]]:
        epoch, pos = divmod(micro_step, self.batches_per_epoch)
        order = np.random.default_rng([self.seed, epoch]).permutation(len(self.n_captions))
        start = pos * self.global_batch + self.rank * self.per_rank
        out = []
        for idx in order[start : start + self.per_rank]:
            n = self.n_captions[idx]
            rng = np.random.default_rng([self.seed, epoch, int(idx)])
            out.append((int(idx), sorted(rng.choice(n, size=min(self.k, n), replace=False).tolist())))
        return out


def load_image(path: str, size: int):
    """RGB image resized to size x size (paper: 512x512 for a fixed image-token count)."""
    from PIL import Image

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"image file missing: {path}")
    with Image.open(p) as im:
        return im.convert("RGB").resize((size, size), Image.Resampling.BICUBIC)


class MicroBatchDataset:
    """Map-style dataset whose item m is the fully collated micro-batch m (use batch_size=None)."""

    def __init__(self, records: list[ImageRecord], plan: BatchPlan, collator, image_size: int):
        self.records, self.plan, self.collator, self.image_size = records, plan, collator, image_size

    def __getitem__(self, micro_step: int) -> dict:
        items = []
        for idx, cap_idx in self.plan.micro_batch(micro_step):
            rec = self.records[idx]
            items.append(
                (idx, load_image(rec.path, self.image_size), rec.prompts, [rec.captions[c] for c in cap_idx])
            )
        return self.collator.train_batch(items)


def _passthrough(x):
    return x


def make_loader(dataset: MicroBatchDataset, start_micro: int, end_micro: int, num_workers: int):
    """DataLoader over micro-steps [start_micro, end_micro) in order (resumable by construction)."""
    from torch.utils.data import DataLoader

    return DataLoader(
        dataset,
        batch_size=None,
        sampler=range(start_micro, end_micro),
        num_workers=num_workers,
        collate_fn=_passthrough,
        pin_memory=False,
        persistent_workers=False,
    )
