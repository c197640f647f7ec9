"""Tests against real vLLM (CPU) serving tiny models that are made and trained at test time."""
