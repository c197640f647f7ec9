"""Readers of external benchmarks (ArtEmis, IRFL): local files in, retrieval or detection sets out."""
