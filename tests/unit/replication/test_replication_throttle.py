"""The replication throttle's token bucket, on a fake clock; and a throttled follower against a scripted leader."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rill.broker.log import LogConfig, LogManager
from rill.broker.replication.replica import Replica, Role
from rill.broker.replication.replica_fetcher import FetcherSettings, ReplicaFetchers
from rill.broker.replication.replication_throttle import ReplicationThrottle
from rill.client.structs import TopicPartition
from tests.unit.replication.scripted_leader import ScriptedLeader


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_bucket_goes_into_debt_and_the_wait_pays_it_back() -> None:
    """A fetch may take more than the credit; the next waits until the debt is paid at the rate."""
    clock = Clock()
    throttle = ReplicationThrottle(1000, clock)
    assert throttle.delay_s() == 0.0 and throttle.fetch_size(1 << 20) == 4096  # a tenth of a second, at least 4 KB
    throttle.record(3000)
    assert throttle.delay_s() == pytest.approx(3.0)
    clock.now += 1.0
    assert throttle.delay_s() == pytest.approx(2.0)
    clock.now += 2.0
    assert throttle.delay_s() == 0.0
    clock.now += 60.0  # idle: at most a tenth of a second of credit builds up
    throttle.record(200)
    assert throttle.delay_s() == pytest.approx(0.1)
    assert throttle.throttled_bytes == 3200


def test_no_rate_is_no_throttle() -> None:
    throttle = ReplicationThrottle()
    throttle.record(10**9)
    assert (throttle.rate, throttle.delay_s(), throttle.fetch_size(123)) == (0, 0.0, 123)
    assert throttle.set_rate(5) and not throttle.set_rate(5)
    with pytest.raises(ValueError):
        throttle.set_rate(-1)


T0 = TopicPartition("r", 0)


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[tuple[LogManager, LogManager]]:
    leader, follower = LogManager(str(tmp_path / "l"), LogConfig()), LogManager(str(tmp_path / "f"), LogConfig())
    yield leader, follower
    leader.close()
    follower.close()


def copy_time(logs: tuple[LogManager, LogManager], throttled: bool, rate: int) -> float:
    """Seconds for a follower to copy 40 KB from a scripted leader (in 2 KB messages)."""
    leader_logs, follower_logs = logs
    leader = ScriptedLeader({T0: leader_logs.create_replica(*T0)}, 0)
    end = leader.append(T0, [bytes(2000)] * 20, epoch=0)
    leader.high_watermark = end
    throttle = ReplicationThrottle(rate)
    fetchers = ReplicaFetchers(FetcherSettings(broker_id=2, max_wait_ms=50, socket_timeout_ms=5000), throttle)
    replica = Replica(follower_logs.create_replica(*T0), broker_id=2)
    replica.role, replica.leader_id, replica.leader_epoch, replica.throttled = Role.FOLLOWER, 1, 0, throttled
    started = time.monotonic()
    try:
        fetchers.add(replica, leader.address)
        while replica.log.end_offset < end:
            assert time.monotonic() - started < 20, "the follower did not catch up"
            time.sleep(0.01)
        return time.monotonic() - started
    finally:
        fetchers.close()
        leader.stop()


def test_a_replica_being_added_is_copied_at_the_rate(logs: tuple[LogManager, LogManager]) -> None:
    """40 KB at 20 KB/s takes about two seconds (the first fetch, a tenth of a second's worth, is free)."""
    assert copy_time(logs, throttled=True, rate=20_000) >= 1.5


def test_a_replica_not_being_added_is_never_throttled(logs: tuple[LogManager, LogManager]) -> None:
    """The same copy by a follower that is not being added ignores the rate."""
    assert copy_time(logs, throttled=False, rate=20_000) < 1.0
