"""Real Spark in local mode for the data-source tests: one SparkSession for the whole run.

Starting Spark costs several seconds, so the session is shared (session scope); each
test uses its own broker (tests/conftest.py ``broker``) and topics.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rill.broker.testing import RunningBroker, running_broker


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from rill.client.spark import spark_session

    session = spark_session("local[2]", "rill-tests", **{"spark.sql.shuffle.partitions": "2",
                                                          "spark.default.parallelism": "2"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def fine_broker(tmp_path: Path) -> Iterator[RunningBroker]:
    """A broker whose time index has an entry for nearly every message (64-byte interval)."""
    with running_broker(tmp_path / "data", num_partitions=2, log_index_interval_bytes=64) as b:
        yield b
