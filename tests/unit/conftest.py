"""Fixtures shared by the storage unit tests."""

from __future__ import annotations

import pytest

from rill.client.clock import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
