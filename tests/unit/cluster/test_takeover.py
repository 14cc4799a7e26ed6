"""GroupPlacement over a fake ZooKeeper store: batched checkpoints, failover, return, graceful moves."""

from __future__ import annotations

import threading
import time

import structlog

from rill.v1 import coordinator_pb2 as pb

from rill.coordinator.group_checkpoint import Writer
from tests.unit.cluster.fakes import FakeStore, Node, group_on

OFFSETS = [0, 14, 28, 42, 56, 70]  # message boundaries of t-0 (payloads of 10 bytes)


def test_checkpoints_are_batched_per_interval() -> None:
    """Many commits to two groups between rounds cost one transaction with one write per group."""
    store = FakeStore()
    a = Node(1, store, [1])
    for offset in OFFSETS[1:]:
        assert a.commit("g", offset) == 0
    assert a.commit("h", OFFSETS[1]) == 0
    a.placement.checkpoint_now()
    assert store.transactions == 1
    assert store.get("g").snapshot.offsets == (("t", 0, OFFSETS[-1]),)  # type: ignore[union-attr]
    assert store.get("h").writer == Writer(1, "instance-1")
    a.placement.checkpoint_now()
    assert store.transactions == 1  # nothing changed: nothing written


def test_dead_coordinators_groups_resume_from_the_checkpoint() -> None:
    """When the coordinator dies its successor loads the last checkpoint; later commits are the lost window."""
    store = FakeStore()
    g = group_on([1, 2], 1)
    a, b = Node(1, store, [1, 2]), Node(2, store, [1, 2])
    assert a.placement.owns(g) and not b.placement.owns(g)
    assert a.commit(g, OFFSETS[2]) == 0
    a.placement.checkpoint_now()
    assert a.commit(g, OFFSETS[3]) == 0  # acknowledged, never checkpointed: a dies now
    b.view([2])
    assert b.placement.owns(g)
    assert b.committed(g) == OFFSETS[2]
    assert store.get(g).writer.broker_id == 2 and not store.get(g).released


def test_returning_broker_takes_the_successors_state_not_its_own() -> None:
    """A broker back from a crash loads what its successor committed, not its own stale local state."""
    store = FakeStore()
    g = group_on([1, 2], 1)
    a, b = Node(1, store, [1, 2]), Node(2, store, [1, 2])
    a.commit(g, OFFSETS[2])
    a.placement.checkpoint_now()
    a.commit(g, OFFSETS[3])
    b.view([2])                       # a died
    b.commit(g, OFFSETS[4])
    b.placement.checkpoint_now()
    b.commit(g, OFFSETS[5])           # not checkpointed, but released when g moves back
    back = Node(1, store, [1, 2], harness=a.h, apply=False)  # a restarts on its data (local: OFFSETS[3])
    assert not back.placement.owns(g)  # b has not released it yet
    b.view([1, 2])
    assert not b.placement.owns(g) and b.committed(g) is None
    assert store.get(g).released
    back.placement.apply_placement()
    assert back.placement.owns(g)
    assert back.committed(g) == OFFSETS[5]


def test_own_newer_local_state_survives_a_restart() -> None:
    """A coordinator restarted on its data keeps its commits made after its own last checkpoint."""
    store = FakeStore()
    a = Node(1, store, [1])
    a.commit("g", OFFSETS[1])
    a.placement.checkpoint_now()
    a.commit("g", OFFSETS[4])
    again = Node(1, store, [1], harness=a.h)
    assert again.placement.owns("g")
    assert again.committed("g") == OFFSETS[4]
    assert store.get("g").snapshot.offsets == (("t", 0, OFFSETS[4]),)  # type: ignore[union-attr]


def test_graceful_move_waits_for_the_release_and_loses_nothing() -> None:
    """A broker joining waits for the live coordinator to release the group, and gets its latest commit."""
    store = FakeStore()
    g = group_on([1], 1, then=([1, 3], 3))
    a = Node(1, store, [1])
    a.commit(g, OFFSETS[1])
    a.placement.checkpoint_now()
    a.commit(g, OFFSETS[5])  # newer than the checkpoint
    releaser = threading.Timer(0.1, a.view, ([1, 3],))
    releaser.start()
    started = time.monotonic()
    with structlog.testing.capture_logs() as logs:
        c = Node(3, store, [1, 3], handover_timeout_ms=5000)
    releaser.join()
    assert time.monotonic() - started < 4
    assert not any(e["event"] == "group.handover_timeout" for e in logs)
    assert c.placement.owns(g) and not a.placement.owns(g)
    assert c.committed(g) == OFFSETS[5]


def test_deleted_group_leaves_a_tombstone() -> None:
    """Deleting a group writes a tombstone, so a broker with old local state does not bring it back."""
    store = FakeStore()
    g = group_on([1, 2], 1)
    a = Node(1, store, [1, 2])
    a.commit(g, OFFSETS[1])
    a.placement.checkpoint_now()
    b = Node(2, store, [1, 2])
    b.view([2])
    assert b.h.call(b.h.coord.delete_group, pb.DeleteGroupRequest(consumer_group=[g])).error_code == pb.NONE
    b.placement.checkpoint_now()
    assert store.get(g).deleted
    back = Node(1, store, [1, 2], harness=a.h, apply=False)
    b.view([1, 2])
    back.placement.apply_placement()
    assert back.committed(g) is None
