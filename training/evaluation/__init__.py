"""Evaluation of the lens model: what `lenses evaluate` runs (`run`), its config, inputs and encodings.

`run` calls each part from the top (a registry, not a chain): `scoring/` (score matrices),
`metrics/` (pure metric kernels), `imp/` (the IMP difficulty split), `systems/` (rows that load
models), `external/` (ArtEmis, IRFL, Karpathy) and `tables/` (markdown from the results dict only).
`types` holds the records they pass; `inputs` fills them. Map: docs/evaluation.md.
"""
