"""Evaluation of the lens model: score matrices, metrics, reports, encodings and the run itself.

`types` (records) <- `inputs` (fill them) <- `run` (score, measure, report); the metric kernels
(`ranking`, `topk`, `metrics`, `lens_slot`) and scorers (`scoring`, `routing`, `ablations`) are
pure functions of arrays. Map: docs/evaluation.md.
"""
