"""Healing a replica's corrupt range from its leader: a real fetcher, real logs, a scripted leader over TCP.

A byte is flipped in the middle of a message in the follower's segment file; the scrubber's
check (or a read after a restart) finds it, the healer cuts the log back to that message
and the fetcher copies the rest again, so the follower ends byte for byte the leader's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest
import structlog

from rill.broker.log import LogConfig, LogManager
from rill.broker.log.integrity import CorruptDataError
from rill.broker.log.log import Log
from rill.broker.log.scrubber import Scrubber
from rill.broker.replication.replica import Replica, Role
from rill.broker.replication.replica_fetcher import ReplicaFetchers
from rill.broker.replication.replica_healer import IsrExitFailed, ReplicaHealer
from rill.client.protocol.messages import encode_message_set
from tests.unit.replication.scripted_leader import ScriptedLeader, log_bytes
from tests.unit.replication.test_replica_fetcher import (  # noqa: F401 (the fixtures are shared)
    DEADLINE_S, T0, fetchers, follower, follower_logs, leader_logs, make_leader, payload, wait_until)

# Messages are the payload plus a 10-byte header: epoch 0 holds [0, 300), epoch 3 starts at 300.
BAD_MESSAGE = 300  # the 150-byte message [300, 450) gets a flipped byte in its payload
FLIPPED_AT = BAD_MESSAGE + 80


def filled_leader(logs: LogManager) -> tuple[ScriptedLeader, int]:
    """A leader in epoch 3 with two epochs of unequal messages; its log end."""
    leader = make_leader(logs, 3)
    leader.append(T0, [payload(90, 1), payload(190, 2)], epoch=0)
    leader.append(T0, [payload(140, 3), payload(60, 4)], epoch=3)
    return leader, leader.append(T0, [payload(30, 5), payload(7, 6)])


def caught_up_follower(logs: LogManager, fetchers: ReplicaFetchers, leader: ScriptedLeader, end: int) -> Replica:
    replica = follower(logs, T0, 3)
    fetchers.add(replica, leader.address)
    assert wait_until(lambda: replica.log.end_offset == end)
    return replica


def flip_byte(log: Log, offset: int) -> None:
    """Rot one byte on disk, behind the log's back."""
    segment = [s for s in log.segments if s.base_offset <= offset][-1]
    with open(segment.path, "r+b") as f:
        f.seek(offset - segment.base_offset)
        byte = f.read(1)
        f.seek(offset - segment.base_offset)
        f.write(bytes([byte[0] ^ 0x5A]))


def scrub(log: Log) -> None:
    Scrubber(lambda: [log], bytes_per_second=1 << 30, interval_s=3600).scrub_pass()


def segment_files(log: Log) -> bytes:
    """The raw bytes of the log's segment files (side files of cut bytes left out)."""
    names = sorted(n for n in os.listdir(log.directory) if n.endswith(".log"))
    return b"".join(Path(log.directory, n).read_bytes() for n in names)


def healer_for(replica: Replica, **kwargs: object) -> ReplicaHealer:
    return ReplicaHealer(lambda key: replica if key == (replica.topic, replica.partition) else None,
                         check_interval_s=0.02, **kwargs)  # type: ignore[arg-type]


def events_named(events: list[dict[str, object]], prefix: str = "replica.heal") -> list[str]:
    return [str(e["event"]) for e in events if str(e["event"]).startswith(prefix)]


def assert_identical(replica: Replica, leader: ScriptedLeader) -> None:
    leader_log = leader.logs[T0]
    assert log_bytes(replica.log) == log_bytes(leader_log)
    assert segment_files(replica.log) == segment_files(leader_log)
    assert replica.epochs.entries() == leader_log.leader_epochs.entries()  # type: ignore[union-attr]


def test_follower_found_corrupt_by_the_scrubber_refetches_and_ends_identical(leader_logs, follower_logs, fetchers):
    """The scrubber finds a flipped byte; the follower cuts back to that message (dropping the epoch that
    started there) and refetches it: bytes, segment files and epoch cache end the leader's."""
    leader, end = filled_leader(leader_logs)
    replica = caught_up_follower(follower_logs, fetchers, leader, end)
    healer = healer_for(replica)
    follower_logs.on_corruption.append(healer.corruption_found)
    flip_byte(replica.log, FLIPPED_AT)
    try:
        with structlog.testing.capture_logs() as events:
            scrub(replica.log)
            assert wait_until(lambda: healer.healed == 1)
        assert wait_until(lambda: replica.log.end_offset == end)
        assert_identical(replica, leader)
        assert events_named(events) == ["replica.healing", "replica.heal_truncated", "replica.healed"]
        (cut,) = [e for e in events if e["event"] == "replica.heal_truncated"]
        assert (cut["from_offset"], cut["to_offset"], cut["latest_epoch"]) == (end, BAD_MESSAGE, 0)
        assert any(e["event"] == "log.corrupt_data" and e["offset"] == BAD_MESSAGE for e in events)
        assert any(".log.corrupt-" in name for name in os.listdir(replica.log.directory))  # the cut bytes are kept aside
    finally:
        healer.close()
        leader.stop()


def test_follower_found_corrupt_by_a_read_after_a_restart_heals(tmp_path, leader_logs, fetchers):
    """Bytes that rot while the broker is down are found by the first read that checks them; the heal follows."""
    leader, end = filled_leader(leader_logs)
    first = LogManager(str(tmp_path / "follower"), LogConfig())
    replica = caught_up_follower(first, fetchers, leader, end)
    fetchers.remove([replica])
    first.close()
    flip_byte(replica.log, FLIPPED_AT)
    logs = LogManager(str(tmp_path / "follower"), LogConfig())
    try:
        replica = follower(logs, T0, 3)
        healer = healer_for(replica)
        logs.on_corruption.append(healer.corruption_found)
        fetchers.add(replica, leader.address)
        piece = replica.log.read(0, 10_000)  # stops before the bad message, and reports it
        assert piece.length == BAD_MESSAGE
        assert wait_until(lambda: healer.healed == 1 and replica.log.end_offset == end)
        assert_identical(replica, leader)
        healer.close()
    finally:
        fetchers.remove([replica])
        logs.close()
        leader.stop()


class FakeIsrExit:
    """The controller's LeaveIsr: answers ``remaining``, or fails, or applies ``on_call`` (a LeaderAndIsr)."""

    def __init__(self, remaining: set[tuple[str, int]] | None = None, fail: bool = False,
                 on_call: object = None) -> None:
        self.remaining = remaining or set()
        self.fail = fail
        self.on_call = on_call
        self.calls: list[list[tuple[str, int]]] = []
        self.closed = False

    def leave_isr(self, partitions: Sequence[tuple[str, int]]) -> set[tuple[str, int]]:
        self.calls.append(list(partitions))
        if self.fail:
            raise IsrExitFailed("no controller")
        if callable(self.on_call):
            self.on_call()
        return self.remaining & set(partitions)

    def close(self) -> None:
        self.closed = True


def leading(replica: Replica, fetchers: ReplicaFetchers) -> Replica:
    """Make the caught-up follower the partition's leader (as a LeaderAndIsr would)."""
    fetchers.remove([replica])
    with replica.lock:
        replica.role, replica.leader_id = Role.LEADER, 2
    return replica


def test_leader_leaves_the_isr_first_then_heals_as_a_follower(leader_logs, follower_logs, fetchers):
    """A leader's corrupt range: it asks to leave the ISR (another replica leads), then cuts and refetches."""
    leader, end = filled_leader(leader_logs)
    replica = leading(caught_up_follower(follower_logs, fetchers, leader, end), fetchers)

    def led_elsewhere() -> None:  # the controller's LeaderAndIsr, applied before its answer
        with replica.lock:
            replica.role, replica.leader_id = Role.FOLLOWER, 1
        fetchers.add(replica, leader.address)

    exit_ = FakeIsrExit(on_call=led_elsewhere)
    healer = healer_for(replica, isr_exit=exit_)
    follower_logs.on_corruption.append(healer.corruption_found)
    flip_byte(replica.log, FLIPPED_AT)
    try:
        scrub(replica.log)
        assert wait_until(lambda: healer.healed == 1 and replica.log.end_offset == end)
        assert exit_.calls == [[("r", 0)]]
        assert_identical(replica, leader)
    finally:
        healer.close()
        leader.stop()
    assert exit_.closed


def test_sole_in_sync_replica_cannot_heal_and_keeps_refusing_the_range(leader_logs, follower_logs, fetchers):
    """With no other in-sync replica the controller keeps it in the ISR: nothing is cut, reads still refuse."""
    leader, end = filled_leader(leader_logs)
    replica = leading(caught_up_follower(follower_logs, fetchers, leader, end), fetchers)
    exit_ = FakeIsrExit(remaining={("r", 0)})
    healer = healer_for(replica, isr_exit=exit_)
    follower_logs.on_corruption.append(healer.corruption_found)
    flip_byte(replica.log, FLIPPED_AT)
    try:
        with structlog.testing.capture_logs() as events:
            scrub(replica.log)
            assert wait_until(lambda: "replica.unhealable" in events_named(events, "replica."))
        assert replica.log.end_offset == end and replica.role is Role.LEADER
        with pytest.raises(CorruptDataError):
            replica.log.read(BAD_MESSAGE, 1000)
        (unhealable,) = [e for e in events if e["event"] == "replica.unhealable"]
        assert unhealable["log_level"] == "error" and unhealable["offset"] == BAD_MESSAGE
    finally:
        healer.close()
        leader.stop()


def test_leader_without_a_controller_is_unhealable(leader_logs, follower_logs, fetchers):
    """No way to move leadership (no ZooKeeper): a leader never cuts its own log."""
    leader, end = filled_leader(leader_logs)
    replica = leading(caught_up_follower(follower_logs, fetchers, leader, end), fetchers)
    healer = healer_for(replica)
    follower_logs.on_corruption.append(healer.corruption_found)
    flip_byte(replica.log, FLIPPED_AT)
    try:
        with structlog.testing.capture_logs() as events:
            scrub(replica.log)
            assert wait_until(lambda: "replica.unhealable" in events_named(events, "replica."))
        assert replica.log.end_offset == end
    finally:
        healer.close()
        leader.stop()


def test_controller_unreachable_gives_up_after_the_attempts(leader_logs, follower_logs, fetchers):
    """LeaveIsr failing every time: after ``attempts`` tries, heal_failed, and the log is left as it is."""
    leader, end = filled_leader(leader_logs)
    replica = caught_up_follower(follower_logs, fetchers, leader, end)
    exit_ = FakeIsrExit(fail=True)
    healer = healer_for(replica, isr_exit=exit_, attempts=3, backoff_s=0.01)
    follower_logs.on_corruption.append(healer.corruption_found)
    flip_byte(replica.log, FLIPPED_AT)
    try:
        with structlog.testing.capture_logs() as events:
            scrub(replica.log)
            assert wait_until(lambda: "replica.heal_failed" in events_named(events))
        assert len(exit_.calls) == 3
        assert replica.log.end_offset == end
    finally:
        healer.close()
        leader.stop()


def test_a_07_style_topic_is_left_alone(tmp_path):
    """A partition that is not a replica: the range is refused as before, and the healer does nothing."""
    logs = LogManager(str(tmp_path / "plain"), LogConfig())
    healer = ReplicaHealer(lambda key: None, check_interval_s=0.02)
    logs.on_corruption.append(healer.corruption_found)
    try:
        logs.create_topic("plain", 1)
        log = logs.get("plain", 0)
        log.append(encode_message_set([payload(90, 1), payload(140, 2), payload(40, 3)]))
        end = log.end_offset
        flip_byte(log, 100 + 80)
        with structlog.testing.capture_logs() as events:
            scrub(log)
            healer.close()
        assert events_named(events) == [] and log.end_offset == end
        with pytest.raises(CorruptDataError):
            log.read(100, 1000)
    finally:
        logs.close()


def test_a_range_already_cut_is_skipped(leader_logs, follower_logs, fetchers):
    """Two reports of ranges in one log: the first heal's cut removes the second, which is skipped."""
    leader, end = filled_leader(leader_logs)
    replica = caught_up_follower(follower_logs, fetchers, leader, end)
    healer = healer_for(replica)
    follower_logs.on_corruption.append(healer.corruption_found)
    flip_byte(replica.log, FLIPPED_AT)
    flip_byte(replica.log, 520 + 20)  # a later message too: a second range (the one between stays valid)
    try:
        with structlog.testing.capture_logs() as events:
            scrub(replica.log)
            assert wait_until(lambda: healer.healed == 1 and replica.log.end_offset == end)
        assert_identical(replica, leader)
        assert events_named(events).count("replica.heal_truncated") == 1
    finally:
        healer.close()
        leader.stop()

