"""Decode and preprocess images for CLIP in threads, in input order, a bounded window ahead.

open_clip's eval transform is [resize, centre crop, convert to RGB] on a PIL image, then
[to tensor (uint8 / 255), normalise]. The PIL half runs here, per image, in a thread pool: Pillow
releases the GIL while it decodes and resamples, so the threads use every core without the cost of
pickling pixels between processes. The result is a uint8 HxWx3 array; the tensor half runs on the
whole batch, on the model's device (`to_model_input`), with the same arithmetic as torchvision's.
A transform of another shape is run whole in the threads instead (`TensorPlan.fused`).

A JPEG is decoded with Pillow's draft mode (libjpeg DCT scaling by 1/2, 1/4 or 1/8) at the
largest reduction that keeps both sides >= the model's input size, so a 2,000 px photograph is not
decoded at full size only to be resized to 224 px (`dedupe.clip_jpeg_draft`; off: full decode).

Failures are per image: an image that cannot be read, decoded or transformed comes back as an
error message for its index, never as a dropped row.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TensorPlan:
    """How a PIL image becomes the model's input: the PIL steps, then either batch-level
    normalisation (`mean`/`std` set) or, when the transform has another shape, the whole
    transform per image (`fused`)."""

    pil_steps: tuple[Callable[[Any], Any], ...]
    mean: tuple[float, ...] | None
    std: tuple[float, ...] | None
    fused: Callable[[Any], Any] | None = None


def plan_from_transform(preprocess: Any) -> TensorPlan:
    """Split open_clip's eval Compose at its ToTensor; fall back to the whole transform per image."""
    from torchvision.transforms import Compose, Normalize, ToTensor

    steps = list(preprocess.transforms) if isinstance(preprocess, Compose) else []
    cut = next((i for i, step in enumerate(steps) if isinstance(step, ToTensor)), None)
    if cut is not None and len(steps) == cut + 2 and isinstance(steps[cut + 1], Normalize):
        norm = steps[cut + 1]
        return TensorPlan(tuple(steps[:cut]), tuple(map(float, norm.mean)), tuple(map(float, norm.std)))
    return TensorPlan((), None, None, fused=preprocess)


def to_model_input(batch: list, plan: TensorPlan, device: str):
    """Stack one batch of views into a float32 NCHW tensor on `device`."""
    import torch

    if plan.fused is not None:
        return torch.stack(batch).to(device)
    pixels = torch.from_numpy(np.stack(batch))
    if device.startswith("cuda"):
        pixels = pixels.pin_memory().to(device, non_blocking=True)  # uint8 crosses the bus: 4x less
    x = pixels.permute(0, 3, 1, 2).float().div(255)  # torchvision ToTensor: uint8 / 255
    mean = torch.tensor(plan.mean, device=x.device).view(1, -1, 1, 1)
    std = torch.tensor(plan.std, device=x.device).view(1, -1, 1, 1)
    return x.sub_(mean).div_(std)  # torchvision Normalize: (x - mean) / std


def make_view(path: str, plan: TensorPlan, draft_side: int | None) -> Any:
    """One image as the model's view: a uint8 HxWx3 array (or the fused transform's tensor)."""
    from lenses_data.candidates.imaging import load_rgb

    image = load_rgb(path, draft=(draft_side, draft_side) if draft_side else None)
    if plan.fused is not None:
        return plan.fused(image)
    for step in plan.pil_steps:
        image = step(image)
    view = np.asarray(image, dtype=np.uint8)
    if view.ndim != 3 or view.shape[2] != 3:
        raise ValueError(f"preprocessed view has shape {view.shape}, expected HxWx3")
    return view


def _view_or_error(path: str, plan: TensorPlan, draft_side: int | None) -> tuple[Any, str | None]:
    try:
        return make_view(path, plan, draft_side), None
    except Exception as error:  # one unreadable image is a rejection, not a failed run
        return None, f"{type(error).__name__}: {error}"


@dataclass
class ViewBatch:
    start: int  # input index of the batch's first path
    views: list  # the views that worked, in input order
    indices: list[int]  # their input indices
    errors: dict[int, str]  # input index -> message, for the ones that failed


def iter_view_batches(
    paths: Sequence[str], plan: TensorPlan, batch_size: int, workers: int, draft_side: int | None
) -> Iterator[ViewBatch]:
    """Batches of views in input order; `workers` threads keep up to two batches ahead."""
    starts = range(0, len(paths), batch_size)
    if workers <= 1:
        for start in starts:
            chunk = paths[start : start + batch_size]
            yield _assemble(start, [_view_or_error(p, plan, draft_side) for p in chunk])
        return
    with ThreadPoolExecutor(workers, thread_name_prefix="clip-decode") as pool:
        window: deque[tuple[int, list[Future]]] = deque()
        for start in starts:
            chunk = paths[start : start + batch_size]
            window.append((start, [pool.submit(_view_or_error, p, plan, draft_side) for p in chunk]))
            if len(window) > 2:  # bounded: at most three batches of views held at once
                first, futures = window.popleft()
                yield _assemble(first, [future.result() for future in futures])
        while window:
            first, futures = window.popleft()
            yield _assemble(first, [future.result() for future in futures])


def _assemble(start: int, outcomes: list[tuple[Any, str | None]]) -> ViewBatch:
    batch = ViewBatch(start, [], [], {})
    for offset, (view, error) in enumerate(outcomes):
        if error is None:
            batch.views.append(view)
            batch.indices.append(start + offset)
        else:
            batch.errors[start + offset] = error
    return batch
