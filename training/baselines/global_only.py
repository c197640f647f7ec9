"""The global-only scorer: cosine of global embeddings.

Scores zero-shot CLIP-style models and the global-only fine-tuned model (loss.mode=global), and is
the "Global only" variant of the similarity ablation. Returns a float32 numpy [n_images, n_texts]
matrix for `training.evaluation.metrics.retrieval`.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F


@torch.no_grad()
def global_scores(
    img_global: torch.Tensor, txt_global: torch.Tensor, *, image_chunk: int = 1024
) -> np.ndarray:
    """Cosine of global embeddings (zero-shot CLIP style and the global-only fine-tuned model)."""
    gu = F.normalize(torch.as_tensor(txt_global).float(), dim=-1)
    out = np.empty((len(img_global), len(gu)), dtype=np.float32)
    for i0 in range(0, len(img_global), image_chunk):
        gv = F.normalize(torch.as_tensor(img_global[i0 : i0 + image_chunk]).float(), dim=-1)
        out[i0 : i0 + image_chunk] = (gv @ gu.T).numpy()
    return out
