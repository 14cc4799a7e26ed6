"""The replica fetcher against a scripted leader over real TCP, with real logs on both sides.

Messages have unequal sizes on purpose: offsets are byte positions, so a follower that
appended at a wrong offset or cut at a wrong boundary shows up as different bytes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import structlog

from rill.broker.log import LogConfig, LogManager
from rill.broker.log.leader_epochs import EpochEntry
from rill.broker.replication import fetcher_thread
from rill.broker.replication.replica import Replica, Role
from rill.broker.replication.replica_fetcher import FetcherSettings, ReplicaFetchers
from rill.client.blocking_connection import BrokerConnection
from rill.client.protocol.messages import encode_message_set
from rill.client.structs import TopicPartition
from tests.unit.replication.scripted_leader import ScriptedLeader, log_bytes

T0, T1 = TopicPartition("r", 0), TopicPartition("r", 1)
BACKOFF_S = 0.2
FIRST_QUICK_RETRY_S = fetcher_thread.FIRST_QUICK_RETRY_S
DEADLINE_S = 10.0


def wait_until(condition: Callable[[], bool], timeout: float = DEADLINE_S) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` passes; whether it held."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def payload(size: int, tag: int) -> bytes:
    return bytes([tag % 256]) * size


@pytest.fixture
def leader_logs(tmp_path: Path) -> Iterator[LogManager]:
    manager = LogManager(str(tmp_path / "leader"), LogConfig())
    yield manager
    manager.close()


@pytest.fixture
def follower_logs(tmp_path: Path) -> Iterator[LogManager]:
    manager = LogManager(str(tmp_path / "follower"), LogConfig())
    yield manager
    manager.close()


@pytest.fixture
def fetchers() -> Iterator[ReplicaFetchers]:
    fetchers = ReplicaFetchers(FetcherSettings(broker_id=2, max_wait_ms=100, max_bytes=300,
                                               backoff_ms=int(BACKOFF_S * 1000), socket_timeout_ms=5000))
    yield fetchers
    assert fetchers.close(timeout_s=DEADLINE_S)


def make_leader(logs: LogManager, epoch: int, *tps: TopicPartition) -> ScriptedLeader:
    return ScriptedLeader({tp: logs.create_replica(*tp) for tp in tps or (T0,)}, epoch)


def follower(logs: LogManager, tp: TopicPartition, leader_epoch: int) -> Replica:
    replica = Replica(logs.create_replica(*tp), broker_id=2)
    replica.role, replica.leader_id, replica.leader_epoch = Role.FOLLOWER, 1, leader_epoch
    return replica


def fetcher_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("rill-replica-fetcher-")]


def test_copies_the_leaders_bytes_and_its_epoch_boundaries(leader_logs, follower_logs, fetchers):
    """Two epochs on the leader give two cache entries on the follower at the same offsets, and identical bytes."""
    leader = make_leader(leader_logs, 3)
    leader.append(T0, [payload(10, 1), payload(200, 2)], epoch=0)
    leader.append(T0, [payload(37, 3)])
    boundary = leader.logs[T0].end_offset
    end = leader.append(T0, [payload(150, 4), payload(1, 5), payload(99, 6)], epoch=3)
    replica = follower(follower_logs, T0, 3)
    fetchers.add(replica, leader.address)
    assert wait_until(lambda: replica.log.end_offset == end)
    assert log_bytes(replica.log) == log_bytes(leader.logs[T0])
    assert replica.epochs.entries() == (EpochEntry(0, 0), EpochEntry(3, boundary))
    assert fetcher_threads()[0].name == "rill-replica-fetcher-1"
    leader.stop()


def test_high_watermark_follows_the_leaders(leader_logs, follower_logs, fetchers):
    """The follower's high watermark is the leader's, clamped to its own log end; describe() shows it caught up."""
    leader = make_leader(leader_logs, 0)
    middle = leader.append(T0, [payload(120, 1)], epoch=0)
    end = leader.append(T0, [payload(80, 2), payload(140, 3)])
    leader.high_watermark = middle
    replica = follower(follower_logs, T0, 0)
    fetchers.add(replica, leader.address)
    assert wait_until(lambda: replica.log.end_offset == end and replica.high_watermark == middle)
    leader.high_watermark = end + 1000  # never above the follower's own log end
    assert wait_until(lambda: replica.follower_high_watermark == end and fetchers.describe()[0].lag_bytes == 1000)
    leader.high_watermark = end
    assert wait_until(lambda: fetchers.describe()[0].lag_bytes == 0)
    (status,) = fetchers.describe()
    assert (status.topic, status.partition, status.leader) == ("r", 0, leader.address)
    assert (status.log_end_offset, status.high_watermark, status.lag_bytes, status.failed) == (end, end, 0, None)
    assert abs(status.last_fetch_ms - time.time() * 1000) < DEADLINE_S * 1000
    leader.stop()


def test_lag_is_leader_high_watermark_minus_log_end(leader_logs, follower_logs):
    """With max_bytes below what the leader has committed, the first answer leaves that many bytes of lag."""
    leader = make_leader(leader_logs, 0)
    end = leader.append(T0, [payload(90, i) for i in range(5)], epoch=0)  # five 100-byte messages
    leader.high_watermark = end
    leader.hold, leader.hold_from = True, 1  # the first request is answered, the second waits
    replica = follower(follower_logs, T0, 0)
    fetchers = ReplicaFetchers(FetcherSettings(broker_id=2, max_wait_ms=100, max_bytes=200, backoff_ms=200))
    try:
        fetchers.add(replica, leader.address)
        assert wait_until(lambda: leader.held == 1)
        (status,) = fetchers.describe()
        assert replica.log.end_offset == 200 and status.lag_bytes == end - 200
        leader.release()
        assert wait_until(lambda: fetchers.describe()[0].lag_bytes == 0 and replica.log.end_offset == end)
    finally:
        assert fetchers.close()
        leader.stop()


def test_divergence_cuts_the_follower_back_and_the_logs_end_identical(leader_logs, follower_logs, fetchers):
    """Trace B (replication.md 2.2) with a 150-byte m3: the follower cuts m2 at 100 and copies m3, byte for byte."""
    leader = make_leader(leader_logs, 1)
    m1, m2, m3 = payload(90, 1), payload(90, 2), payload(140, 3)  # 100, 100 and 150 bytes with headers
    assert len(encode_message_set([m3])) == 150
    leader.append(T0, [m1], epoch=0)
    end = leader.append(T0, [m3], epoch=1)
    replica = follower(follower_logs, T0, 1)
    replica.epochs.assign(0, 0)
    replica.log.append(encode_message_set([m1, m2]))
    replica.follower_high_watermark = 200
    with structlog.testing.capture_logs() as events:
        fetchers.add(replica, leader.address)
        assert wait_until(lambda: replica.log.end_offset == end and replica.epochs.latest_epoch() == 1)
    assert log_bytes(replica.log) == log_bytes(leader.logs[T0]) == encode_message_set([m1, m3])
    assert replica.epochs.entries() == (EpochEntry(0, 0), EpochEntry(1, 100))
    cuts = [(e["from_offset"], e["to_offset"]) for e in events if e["event"] == "replica.truncated"]
    assert cuts == [(200, 100)]
    leader.stop()


def test_kip_279_successive_elections_converge(leader_logs, follower_logs, fetchers):
    """KIP-279's trace: the follower (a b f, epochs 0,1,3) cuts twice and ends with the leader's a c d e g h."""
    leader = make_leader(leader_logs, 4)
    sizes = {"a": 30, "b": 45, "c": 60, "d": 15, "e": 80, "f": 25, "g": 55, "h": 5}
    leader.append(T0, [payload(sizes["a"], 1)], epoch=0)
    leader.append(T0, [payload(sizes[m], i) for i, m in enumerate("cde")], epoch=2)
    end = leader.append(T0, [payload(sizes[m], i) for i, m in enumerate("gh")], epoch=4)
    replica = follower(follower_logs, T0, 4)
    replica.epochs.assign(0, 0)
    replica.log.append(encode_message_set([payload(sizes["a"], 1)]))
    replica.epochs.assign(1, replica.log.end_offset)
    replica.log.append(encode_message_set([payload(sizes["b"], 2)]))
    replica.epochs.assign(3, replica.log.end_offset)
    replica.log.append(encode_message_set([payload(sizes["f"], 3)]))
    with structlog.testing.capture_logs() as events:
        fetchers.add(replica, leader.address)
        assert wait_until(lambda: replica.log.end_offset == end and replica.epochs.latest_epoch() == 4)
    assert log_bytes(replica.log) == log_bytes(leader.logs[T0])
    assert replica.epochs.entries() == leader.logs[T0].leader_epochs.entries()
    assert len([e for e in events if e["event"] == "replica.truncated"]) == 2
    leader.stop()


def test_out_of_range_below_the_leaders_start_restarts_the_log_there(leader_logs, follower_logs, fetchers):
    """A follower whose log end is below the leader's log start starts empty at that start, then copies."""
    leader = make_leader(leader_logs, 2)
    leader.logs[T0].truncate_fully_and_start_at(500)
    end = leader.append(T0, [payload(70, 1), payload(33, 2)], epoch=2)
    replica = follower(follower_logs, T0, 2)
    replica.epochs.assign(0, 0)
    replica.log.append(encode_message_set([payload(290, 9)]))  # 300 bytes, below 500
    fetchers.add(replica, leader.address)
    assert wait_until(lambda: replica.log.end_offset == end)
    assert replica.log.start_offset == 500
    assert log_bytes(replica.log) == log_bytes(leader.logs[T0])
    assert replica.epochs.entries() == (EpochEntry(2, 500),)
    leader.stop()


def test_not_leader_is_asked_again_soon_then_ever_less_often(leader_logs, follower_logs, fetchers):
    """NotLeaderForPartition mostly means the leader has not handled its LeaderAndIsr yet (the controller told
    both at once): the first retry comes after FIRST_QUICK_RETRY_S, each next one after twice as long, up to
    the back-off, never in a spin; fetching resumes once served. (With the full back-off at once, acks=all
    produces stalled for replica.fetch.backoff.ms after one in five controlled shutdowns.)"""
    leader = make_leader(leader_logs, 0)
    leader.mode = "not_leader"
    replica = follower(follower_logs, T0, 0)
    fetchers.add(replica, leader.address)
    assert wait_until(lambda: len(leader.requests) >= 7)
    times = [t for t, _ in leader.requests[:7]]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert FIRST_QUICK_RETRY_S * 0.9 <= gaps[0] < BACKOFF_S / 2
    assert all(later >= earlier * 1.5 or later >= BACKOFF_S * 0.9 for earlier, later in zip(gaps, gaps[1:]))
    assert BACKOFF_S * 0.9 <= gaps[-1] < BACKOFF_S * 1.5
    assert replica.log.end_offset == 0
    end = leader.append(T0, [payload(64, 1)], epoch=0)
    leader.mode = "serve"
    assert wait_until(lambda: replica.log.end_offset == end)
    (status,) = fetchers.describe()
    assert not status.backing_off
    leader.stop()


def test_a_leader_closing_every_connection_is_retried_once_per_back_off(leader_logs, follower_logs, fetchers):
    """A connection closed on each request costs one reconnect per back-off, and the partition is copied later."""
    leader = make_leader(leader_logs, 0)
    leader.mode = "close"
    replica = follower(follower_logs, T0, 0)
    fetchers.add(replica, leader.address)
    assert wait_until(lambda: len(leader.accepted) >= 4)
    times = leader.accepted[:4]
    assert min(b - a for a, b in zip(times, times[1:])) >= BACKOFF_S * 0.9
    end = leader.append(T0, [payload(64, 1)], epoch=0)
    leader.mode = "serve"
    assert wait_until(lambda: replica.log.end_offset == end)
    leader.stop()


def test_leader_gone_then_back_the_fetcher_reconnects(leader_logs, follower_logs, fetchers, monkeypatch):
    """With the leader's port refusing, connects are tried once per back-off; when it listens again fetching resumes."""
    attempts: list[float] = []

    def counting(*args: object, **kwargs: object) -> BrokerConnection:
        attempts.append(time.monotonic())
        return BrokerConnection(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fetcher_thread, "BrokerConnection", counting)
    leader = make_leader(leader_logs, 0)
    first = leader.append(T0, [payload(10, 1)], epoch=0)
    replica = follower(follower_logs, T0, 0)
    fetchers.add(replica, leader.address)
    assert wait_until(lambda: replica.log.end_offset == first)
    leader.stop()
    before = len(attempts)
    assert wait_until(lambda: len(attempts) >= before + 4)
    times = attempts[before + 1:before + 4]
    assert min(b - a for a, b in zip(times, times[1:])) >= BACKOFF_S * 0.9
    end = leader.append(T0, [payload(200, 2), payload(3, 3)])
    leader.start()
    assert wait_until(lambda: replica.log.end_offset == end)
    assert log_bytes(replica.log) == log_bytes(leader.logs[T0])
    leader.stop()


def test_remove_returns_during_a_long_poll_and_nothing_is_appended_after(leader_logs, follower_logs, fetchers):
    """remove() returns while a request holding the replica is in flight; its answer is then dropped, not appended."""
    leader = make_leader(leader_logs, 0, T0, T1)
    replicas = {tp: follower(follower_logs, tp, 0) for tp in (T0, T1)}
    for tp, replica in replicas.items():
        fetchers.add(replica, leader.address)
    assert wait_until(lambda: any(len(r.partitions) == 2 for _, r in leader.requests))
    leader.hold = True  # the next request holds both partitions
    assert wait_until(lambda: leader.held == 1)
    assert len(leader.requests[-1][1].partitions) == 2
    started = time.monotonic()
    fetchers.remove([replicas[T0]])
    assert time.monotonic() - started < 1.0 and leader.held == 1
    leader.append(T0, [payload(40, 1)], epoch=0)
    end1 = leader.append(T1, [payload(50, 2)], epoch=0)
    asked = len(leader.requests)
    leader.release()  # the held request is answered with both partitions' new bytes
    assert wait_until(lambda: replicas[T1].log.end_offset == end1 and len(leader.requests) > asked)
    assert replicas[T0].log.end_offset == 0 and replicas[T0].epochs.entries() == ()
    assert {(p.topic, p.partition) for _, r in leader.requests[asked:] for p in r.partitions} == {T1}
    fetchers.remove([replicas[T1]])
    assert wait_until(lambda: not fetcher_threads())  # the thread ends with its last partition
    leader.stop()


def test_close_ends_every_thread_within_a_bound(leader_logs, follower_logs, tmp_path):
    """close() stops the threads of two leaders, each in a long poll, within a bound."""
    leader_a = make_leader(leader_logs, 0, T0)
    other = LogManager(str(tmp_path / "leader-b"), LogConfig())
    leader_b = ScriptedLeader({T1: other.create_replica(*T1)}, 0)
    fetchers = ReplicaFetchers(FetcherSettings(broker_id=2, max_wait_ms=300, backoff_ms=200))
    try:
        fetchers.add(follower(follower_logs, T0, 0), leader_a.address)
        replica_b = follower(follower_logs, T1, 0)
        replica_b.leader_id = -1  # unknown id: the thread is named after the address
        fetchers.add(replica_b, leader_b.address)
        assert wait_until(lambda: bool(leader_a.requests and leader_b.requests))
        assert sorted(t.name for t in fetcher_threads()) == sorted(
            ["rill-replica-fetcher-1", f"rill-replica-fetcher-127.0.0.1:{leader_b.address[1]}"])
        started = time.monotonic()
        assert fetchers.close(timeout_s=3.0)
        assert time.monotonic() - started < 3.0 and not fetcher_threads()
        with pytest.raises(RuntimeError):
            fetchers.add(replica_b, leader_b.address)
    finally:
        fetchers.close()
        leader_a.stop()
        leader_b.stop()
        other.close()


def test_corrupt_bytes_are_never_appended(leader_logs, follower_logs, fetchers):
    """Bytes that fail their CRC are refused, no epoch is recorded for them, and the partition backs off."""
    leader = make_leader(leader_logs, 0)
    leader.mode = "corrupt"
    end = leader.append(T0, [payload(90, 1)], epoch=0)
    replica = follower(follower_logs, T0, 0)
    with structlog.testing.capture_logs() as events:
        fetchers.add(replica, leader.address)
        assert wait_until(lambda: len(leader.requests) >= 3)
    with replica.lock:  # the fetcher records an epoch before each attempt and takes it back under this lock
        assert replica.log.end_offset == 0 and replica.epochs.entries() == ()
    assert any(e["event"] == "replica.invalid_data" for e in events)
    times = [t for t, _ in leader.requests[:3]]
    assert min(b - a for a, b in zip(times, times[1:])) >= BACKOFF_S * 0.9
    leader.mode = "serve"
    assert wait_until(lambda: replica.log.end_offset == end)
    leader.stop()


def test_a_failed_log_stops_its_fetching_only(leader_logs, follower_logs, fetchers):
    """A follower log that raises StorageError is fetched no more; the leader's other partition goes on."""
    leader = make_leader(leader_logs, 0, T0, T1)
    broken, healthy = follower(follower_logs, T0, 0), follower(follower_logs, T1, 0)
    broken.log.abandon()  # closed: every append raises StorageError
    leader.append(T0, [payload(20, 1)], epoch=0)
    fetchers.add(broken, leader.address)
    fetchers.add(healthy, leader.address)
    assert wait_until(lambda: any(s.failed for s in fetchers.describe()))
    asked = len(leader.requests_for(T0))
    end = leader.append(T1, [payload(30, 2)], epoch=0)
    assert wait_until(lambda: healthy.log.end_offset == end)
    assert len(leader.requests_for(T0)) == asked
    assert [s.partition for s in fetchers.describe() if s.failed] == [0]
    leader.stop()


@pytest.mark.parametrize("changes", [dict(socket_timeout_ms=500), dict(max_bytes=0), dict(backoff_ms=-1)])
def test_settings_refuse_a_socket_timeout_not_above_the_wait_and_negative_values(changes):
    """FetcherSettings raises ValueError when a long poll would always time out, or for a negative or empty value."""
    with pytest.raises(ValueError):
        FetcherSettings(broker_id=2, **changes)
