"""Fixtures shared by the storage unit tests."""

from __future__ import annotations

import pytest


class FakeClock:
    """A clock whose ``time()`` moves only when a test sets ``now``."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
