"""What the consumer tests share: a broker that allows short sessions, and a factory of group consumers.

A test module keeps its own ``broker`` and ``consumers`` fixtures (their partitions and
defaults differ) and builds them from these::

    @pytest.fixture
    def broker(tmp_path: Path) -> Iterator[RunningBroker]:
        with short_session_broker(tmp_path, partitions=2) as b:
            yield b

    @pytest.fixture
    def consumers(broker: RunningBroker) -> Iterator[Callable[..., Consumer]]:
        yield from consumer_factory(broker, enable_auto_commit=False)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rill.broker.testing import RunningBroker, running_broker
from rill.client.consumer import Consumer

SESSION_MS = 1000  # the broker allows sessions this short, so rebalances take well under a second
HEARTBEAT_MS = 100


@contextmanager
def short_session_broker(tmp_path: Path, partitions: int) -> Iterator[RunningBroker]:
    """An in-process broker (``partitions`` per new topic) accepting sessions down to 200 ms."""
    with running_broker(tmp_path / "data", num_partitions=partitions, group_min_session_timeout_ms=200) as b:
        yield b


def consumer_factory(broker: RunningBroker, **defaults: Any) -> Iterator[Callable[..., Consumer]]:
    """Yield ``make(**settings)``: a consumer of group "g" on ``broker`` with short sessions and fetch waits
    (``defaults``, then ``settings``, override them); every consumer made is closed afterwards."""
    made: list[Consumer] = []

    def make(**settings: Any) -> Consumer:
        consumer = Consumer(**{"bootstrap_servers": broker.address, "group_id": "g", "session_timeout_ms": SESSION_MS,
                               "heartbeat_interval_ms": HEARTBEAT_MS, "fetch_max_wait_ms": 100,
                               **defaults, **settings})
        made.append(consumer)
        return consumer

    yield make
    for consumer in made:
        consumer.close()
