"""A follower's log starts no earlier than its leader's: segments the leader deleted go on the follower too.

This is how the groups topic's compaction (a leader deletes the segments before its
snapshot) reaches its followers, and Kafka's KIP-107 step for every replicated topic.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rill.broker.log import LogConfig, LogManager
from rill.broker.replication.replica_fetcher import FetcherSettings, ReplicaFetchers
from rill.client.structs import TopicPartition
from tests.unit.replication.scripted_leader import log_bytes
from tests.unit.replication.test_replica_fetcher import follower, make_leader, payload, wait_until

T0 = TopicPartition("r", 0)
SMALL = LogConfig(segment_bytes=1024)


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[tuple[LogManager, LogManager]]:
    leader, follower_ = LogManager(str(tmp_path / "leader"), SMALL), LogManager(str(tmp_path / "follower"), SMALL)
    yield leader, follower_
    leader.close()
    follower_.close()


def test_segments_below_the_leaders_start_are_deleted_on_the_follower(logs: tuple[LogManager, LogManager]) -> None:
    leader_logs, follower_logs = logs
    fetchers = ReplicaFetchers(FetcherSettings(broker_id=2, max_wait_ms=50, max_bytes=4096, backoff_ms=100,
                                               socket_timeout_ms=5000))
    leader = make_leader(leader_logs, 1)
    try:
        for n in range(12):
            end = leader.append(T0, [payload(300, n)], epoch=1)
        replica = follower(follower_logs, T0, 1)
        fetchers.add(replica, leader.address)
        assert wait_until(lambda: replica.log.end_offset == end)
        segments_before = len(replica.log.segments)
        assert segments_before > 3
        leader_log = leader.logs[T0]
        deleted = leader_log.delete_oldest_segments(lambda segments: 3)  # as compaction or retention would
        assert len(deleted) == 3
        end = leader.append(T0, [payload(5, 99)])  # the next fetch carries the new log start
        assert wait_until(lambda: replica.log.end_offset == end and replica.log.start_offset == leader_log.start_offset)
        assert [s.base_offset for s in replica.log.segments] == [s.base_offset for s in leader_log.segments]
        assert log_bytes(replica.log) == log_bytes(leader_log)
    finally:
        assert fetchers.close(timeout_s=10)
        leader.stop()
