"""Metric kernels over score matrices: ranks, top-k, retrieval metrics, the lens-slot protocol, routing."""
