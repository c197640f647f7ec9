"""Lens-slot retriever: the model as a library, its training loop, evaluation, baselines.

Sub-packages, in the order they may import each other (never upward; tests/training/test_layout.py
checks there is no import cycle between modules or between sub-packages):

- `training.evaluation`  scoring, metrics, reports, encodings, the evaluation run
- `training.baselines`   other systems scored beside the lens model (zero-shot open_clip, global-only)
- `training.external`    readers of external benchmarks (ArtEmis, IRFL)
- `training.loop`        the training loop and what only training needs (data, inputs, optimiser,
                         checkpoints, distributed); `python -m training.loop` is the torchrun entry
- `training.dryrun`      tiny random-weight base model and a synthetic export, for tests and dry runs
- `training.retriever`   the model and its math: lenses, config, model, similarity, losses, build

Kept cheap to import: torch and transformers are imported by the submodules that need them,
never here.
"""

from training.retriever.lenses import LENS_TOKENS, NUM_LENSES, PROMPT_TOKEN

__all__ = ["LENS_TOKENS", "NUM_LENSES", "PROMPT_TOKEN"]
