"""The training loop and what only training needs: export reading and batch plans (`data`), input
strings and collation (`inputs`), AdamW and the LR schedule (`optim`), checkpoints (`checkpoint`),
torchrun setup and cross-rank gathering (`dist`), and the loop itself (`train`).

`python -m training.loop --config CFG` (or torchrun `-m training.loop`) runs `training.loop.train.main`.
"""
