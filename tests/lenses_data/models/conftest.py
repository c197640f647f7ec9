"""Fixtures shared by the model client's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lenses_data.models import probe


@pytest.fixture
def fresh_probe_cache() -> Iterator[None]:
    """No probe report cached before or after the test (reports are cached per process)."""
    probe.forget()
    yield
    probe.forget()
