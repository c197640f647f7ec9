"""Other systems scored beside the lens model: zero-shot open_clip and the global-only scorer.

Nothing here imports `training.evaluation`; the evaluation run imports these (one direction).
"""
