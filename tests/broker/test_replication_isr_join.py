"""acks=all while the ISR write that adds a follower is in flight (ZooKeeper slow, or out of reach for a while).

A leader broker over real TCP; followers 7 (in sync) and 8 (joining) are played by raw
REPLICA_FETCH requests, and ISR writes are held by the test instead of going to
ZooKeeper (tests/broker/test_replication_leader.py has the rest of the leader's side).
Once written, the ISR names follower 8, and the controller may elect it if the leader
is lost: nothing may be acknowledged that it lacks, from the moment its join is proposed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rill.broker.replication.isr_writer import IsrWriteResult
from rill.broker.replication.replica import PartitionRole
from rill.broker.testing import RunningBroker, running_broker
from rill.client.protocol import requests as rq
from rill.client.protocol.replica_fetch import NO_EPOCH
from rill.client.zookeeper.replica_layout import PartitionState
from tests.broker.test_replication_leader import EPOCH, ME, produce, replica_fetch
from tests.conftest import RawClient

FOLLOWER, JOINER = 7, 8


class HeldIsrWrites:
    """Stands in for the IsrWriter: keeps each write until the test settles it."""

    def __init__(self) -> None:
        self.held: list[tuple[PartitionState, int, Callable[[IsrWriteResult], object]]] = []

    def write(self, topic: str, partition: int, state: PartitionState, zk_version: int,
              done: Callable[[IsrWriteResult], object]) -> None:
        self.held.append((state, zk_version, done))

    def settle(self, written: bool) -> PartitionState:
        state, version, done = self.held.pop(0)
        done(IsrWriteResult(True, version + 1, None) if written else IsrWriteResult(False, -1, None))
        return state

    def close(self) -> None:
        pass


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[tuple[RunningBroker, HeldIsrWrites]]:
    with running_broker(tmp_path / "data", replica_lag_time_max_ms=60_000) as b:
        writes = HeldIsrWrites()
        b.broker.replicas.isr_writer = writes  # type: ignore[assignment]
        role = PartitionRole("rep", 0, ME, EPOCH, (ME, FOLLOWER), (ME, FOLLOWER, JOINER), 0, 0)
        others = [rq.BrokerInfo(FOLLOWER, "127.0.0.1", 1, 0), rq.BrokerInfo(JOINER, "127.0.0.1", 2, 0)]
        assert b.broker.replicas.apply_roles(0, 1, [role], others) == {("rep", 0): 0}
        yield b, writes


def eventually(check: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def join_in_flight(b: RunningBroker, writes: HeldIsrWrites) -> tuple[list[rq.PartitionAck], threading.Thread, int]:
    """Follower 8 asks to join (its write held), then an acks=all produce that follower 7 fetches past."""
    follower, joiner = RawClient(b.host, b.port), RawClient(b.host, b.port)
    replica_fetch(follower, 0, last_epoch=NO_EPOCH)
    replica_fetch(joiner, 0, last_epoch=NO_EPOCH, replica=JOINER)
    eventually(lambda: len(writes.held) == 1)
    assert set(writes.held[0][0].isr) == {ME, FOLLOWER, JOINER}
    answers: list[rq.PartitionAck] = []
    producer = RawClient(b.host, b.port)
    thread = threading.Thread(target=lambda: answers.append(produce(producer, [b"acked?"], rq.Acks.ALL)))
    thread.start()
    eventually(lambda: b.broker.logs.get("rep", 0).end_offset > 0)
    end = b.broker.logs.get("rep", 0).end_offset
    replica_fetch(follower, end)
    return answers, thread, end


def test_acks_all_waits_for_a_follower_whose_isr_join_is_being_written(
        leader: tuple[RunningBroker, HeldIsrWrites]) -> None:
    """With follower 8's join in flight, a message follower 7 has is not acknowledged until 8 has it too."""
    b, writes = leader
    answers, thread, end = join_in_flight(b, writes)
    time.sleep(0.3)
    assert not answers, "acknowledged while a replica the ISR is about to list lacks it"
    writes.settle(written=True)
    replica_fetch(RawClient(b.host, b.port), end, replica=JOINER)
    thread.join(timeout=10)
    assert answers and answers[0].error == 0 and answers[0].next_offset == end


def test_a_join_that_fails_to_be_written_releases_the_wait(leader: tuple[RunningBroker, HeldIsrWrites]) -> None:
    """If the join's write fails, follower 8 stays out and the produce is acknowledged on follower 7's copy."""
    b, writes = leader
    answers, thread, end = join_in_flight(b, writes)
    writes.settle(written=False)
    thread.join(timeout=10)
    assert answers and answers[0].error == 0 and answers[0].next_offset == end
