"""Fixtures for tests and dry runs, out of the model's way: a tiny random-weight LLaVA-Next with a
locally trained tokenizer (`tiny`) and a small export of skimage images (`synthetic`)."""
