"""A broker told that a reassignment moved its replica away: it stops leading, fails what waits, deletes the log.

The roles come the way the controller sends them (ReplicaManager.apply_roles): the
partition's replicas no longer list this broker. No ZooKeeper here.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import structlog

from rill.broker.replication.replica import PartitionRole
from rill.broker.testing import running_broker
from rill.client.errors import ErrorCode
from rill.client.protocol import requests as rq
from tests.broker.test_replication_leader import FOLLOWER, ME, make_role, produce
from tests.conftest import RawClient

OTHER = 8


def moved(epoch: int) -> PartitionRole:
    """The partition's role once moved to {FOLLOWER, OTHER}: FOLLOWER leads."""
    return PartitionRole("rep", 0, FOLLOWER, epoch, (FOLLOWER, OTHER), (FOLLOWER, OTHER), 3)


def wait_until(check: object, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def test_a_replica_moved_away_is_stopped_and_its_directory_deleted(tmp_path: Path) -> None:
    """The leader's waiting acks=all produce fails (RequestTimedOut: its outcome is unknown), produces are refused, and <topic>-<p> goes, files and all;
    an older role that leaves it out changes nothing."""
    data = tmp_path / "data"
    with running_broker(data, replica_lag_time_max_ms=60_000) as b:
        others = [rq.BrokerInfo(FOLLOWER, "127.0.0.1", 1, 0), rq.BrokerInfo(OTHER, "127.0.0.1", 2, 0)]
        assert b.broker.replicas.apply_roles(0, 1, [make_role(epoch=3)], others) == {("rep", 0): 0}
        raw = RawClient(b.host, b.port)
        kept = produce(raw, [b"kept"])
        assert kept.error == 0
        assert b.broker.replicas.apply_roles(0, 1, [moved(2)], others) == {}  # older: ignored
        assert (data / "rep-0").is_dir()
        answers: list[rq.PartitionAck] = []
        waiting = threading.Thread(target=lambda: answers.append(produce(RawClient(b.host, b.port), [b"w"],
                                                                         rq.Acks.ALL)))
        waiting.start()
        assert wait_until(lambda: b.broker.logs.get("rep", 0).end_offset > kept.next_offset)
        with structlog.testing.capture_logs() as logs:
            assert b.broker.replicas.apply_roles(0, 2, [moved(4)], others) == {}
        waiting.join(timeout=10)
        assert answers and answers[0].error == ErrorCode.REQUEST_TIMED_OUT  # leadership moved: outcome unknown
        assert not (data / "rep-0").exists()
        assert wait_until(lambda: not [n for n in os.listdir(data) if n.startswith("rep-0")])
        assert ("rep", 0) not in b.broker.replicas.replicas and ("rep", 0) not in b.broker.logs.replicas()
        # no replica here, the partition led elsewhere: the client's metadata is stale (Kafka's NOT_LEADER)
        assert produce(raw, [b"refused"]).error == ErrorCode.NOT_LEADER_FOR_PARTITION
        assert [e["event"] for e in logs if e["event"].startswith("replica.")][:1] == ["replica.removed"]
    assert ME not in moved(4).replicas
