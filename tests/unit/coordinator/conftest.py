"""Fixtures for the coordinator unit tests."""

from __future__ import annotations

import pytest

from rill.v1 import coordinator_pb2 as pb

from tests.unit.coordinator.harness import Harness


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    assert harness.create().error_code == pb.NONE
    return harness
