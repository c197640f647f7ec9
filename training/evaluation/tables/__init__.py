"""Markdown: the generic per-protocol report and the papers' tables, read from the results dict only."""
