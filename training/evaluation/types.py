"""The two records an evaluation passes around: the split's labels and the lens model's encodings.

They sit apart from the code that fills them (`training.evaluation.inputs`) and the code that
reads them (`training.evaluation.run`), so neither module needs the other's import.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

# The names of the lens model's and the fine-tuned global-only baseline's rows in results["systems"];
# the run writes them, the harnesses and the tables read them.
MAIN_SYSTEM = "Lenses (lens-masked + global)"
FINE_TUNED = "Global-only fine-tuned"


@dataclass
class SplitLabels:
    """The split in `training.evaluation.encode` order: images by image_id, captions by text_id."""

    image_ids: list[str]
    image_paths: list[str]
    caption_ids: list[str]
    captions: list[str]
    caption_image: np.ndarray
    caption_lens: np.ndarray
    prompt_sets: list[list[tuple[str, int]]]  # per image: (prompt, lens) sorted by lens, text_id
    prompts: list[str]
    prompt_image: np.ndarray
    prompt_lens: np.ndarray


@dataclass
class EncodedSplit:
    """Image and caption encodings of one split, aligned with the export tables.

    caption_image[j] is the row in the image tensors of caption j's image; caption_lens[j] its
    lens index. Prompt globals (image-side prompts encoded as texts) enable text-only retrieval.
    """

    img_slots: torch.Tensor  # [n_img, S, d]
    img_slot_lens: torch.Tensor  # [n_img, S] (0-4, -1 padding)
    img_global: torch.Tensor  # [n_img, d]
    txt_slots: torch.Tensor  # [n_txt, 5, d]
    txt_global: torch.Tensor  # [n_txt, d]
    caption_image: np.ndarray
    caption_lens: np.ndarray
    prompt_global: torch.Tensor | None = None
    prompt_image: np.ndarray | None = None
    prompt_lens: np.ndarray | None = None


@dataclass
class DiscardedTexts:
    """Captions of the split's images that the build's validators discarded (IMP negatives)."""

    texts: list[str]
    image: np.ndarray  # [k] image row (SplitLabels order) of each text
    lens: np.ndarray  # [k] lens index of each text
    note: str  # where they came from, or why there are none
    text_ids: list[str] = field(default_factory=list)  # [k]
    validator: list[str] = field(
        default_factory=list
    )  # [k] stage that discarded it: visual_validate or validate
    rejection: list[str] = field(default_factory=list)  # [k] "<reason>: <message>" of its rejection row
