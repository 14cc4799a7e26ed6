"""ReplicaManager.apply_roles on a broker whose event loop has stopped (it is shutting down): it fails at once.

Seen when SIGTERM reached every broker of a cluster together: the controller's
LeaderAndIsr reached a broker whose loop had just stopped, and apply_roles waited the
whole APPLY_TIMEOUT_S (30 s) for a loop that would never run the work, holding the
process (its gRPC worker thread) for 30 s after ``broker.stopped``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Mapping

import pytest

from rill.broker.dataplane.event_loop import EventLoop, LoopStopped
from rill.broker.log.log import Log
from rill.broker.replication import replica_manager
from rill.broker.replication.replica import PartitionRole, Replica
from rill.broker.replication.replica_manager import ReplicaManager
from rill.client.protocol import requests as rq
from rill.client.structs import Address

ME = 1


class NoReplicas:
    """A data directory holding no replica (the roles below only describe other brokers' partitions)."""

    def replicas(self) -> Mapping[tuple[str, int], Log]:
        return {}

    def create_replica(self, topic: str, partition: int) -> Log:
        raise AssertionError("no replica of this broker is named")

    def delete_replica(self, topic: str, partition: int) -> bool:
        return False


class NoFetchers:
    def add(self, replica: Replica, leader: Address) -> None:
        raise AssertionError("nothing to follow")

    def remove(self, replicas: Iterable[Replica]) -> None:
        pass


class Loop(EventLoop):
    """The event loop with the data plane's one extra method (no connections here)."""

    def mark_dirty(self, conn: object) -> None:
        pass


@pytest.fixture
def stopped_loop(monkeypatch: pytest.MonkeyPatch) -> Iterator[Loop]:
    monkeypatch.setattr(replica_manager, "APPLY_TIMEOUT_S", 3.0)  # the old wait, shortened: the test fails in 3 s
    loop = Loop()
    yield loop
    loop.close()


def elsewhere() -> PartitionRole:
    return PartitionRole("rep", 0, 2, 1, (2, 3), (2, 3), 0)


def test_apply_roles_on_a_stopped_loop_fails_at_once_with_loop_stopped(stopped_loop: Loop) -> None:
    """The loop was stopped before the LeaderAndIsr came: LoopStopped at once, nothing applied."""
    manager = ReplicaManager(ME, NoReplicas(), stopped_loop, NoFetchers(), None)
    stopped_loop.stop()
    began = time.monotonic()
    with pytest.raises(LoopStopped):
        manager.apply_roles(0, 1, [elsewhere()], [rq.BrokerInfo(2, "127.0.0.1", 1, 0)])
    assert time.monotonic() - began < 1.0
    assert manager.partition_leaders == {} and manager.controller_epoch == -1


def test_apply_roles_waiting_when_the_loop_closes_fails_at_once(stopped_loop: Loop) -> None:
    """The loop stops and closes while apply_roles waits for it: the wait ends with LoopStopped, not a timeout."""
    manager = ReplicaManager(ME, NoReplicas(), stopped_loop, NoFetchers(), None)
    errors: list[BaseException] = []

    def apply() -> None:
        try:
            manager.apply_roles(0, 1, [elsewhere()], [])
        except BaseException as exc:
            errors.append(exc)

    waiting = threading.Thread(target=apply)
    waiting.start()
    time.sleep(0.2)  # it waits: nothing runs this loop
    stopped_loop.stop()
    stopped_loop.close()
    waiting.join(timeout=1.0)
    assert not waiting.is_alive() and len(errors) == 1 and isinstance(errors[0], LoopStopped), errors
