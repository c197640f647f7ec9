"""The lens-slot retriever as a library: lens inventory, run config, model, similarity, losses, build.

Imports nothing else from `training` (only `lenses_data.schemas`).
"""
