"""Fakes for the cluster tests: an in-memory checkpoint store with ZooKeeper's conditional writes, and a registry."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError

from rill.broker.cluster.group_placement import GroupPlacement
from rill.client.zookeeper.registry import BrokerRegistration, ClusterSnapshot
from rill.coordinator import group_checkpoint
from rill.coordinator.group_checkpoint import Checkpoint
from rill.coordinator.placement import coordinator_for
from rill.v1 import coordinator_pb2 as pb
from tests.unit.coordinator.harness import Harness


class FakeStore:
    """``/rill/groups`` in memory: group -> (encoded checkpoint, version); ``transactions`` counts write batches."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, int]] = {}
        self.transactions = 0

    def read(self, group: str) -> tuple[Checkpoint | None, int | None]:
        found = self.nodes.get(group)
        return (None, None) if found is None else (group_checkpoint.decode(found[0]), found[1])

    def get(self, group: str) -> Checkpoint:
        cp = self.read(group)[0]
        assert cp is not None
        return cp

    def names(self) -> list[str]:
        return sorted(self.nodes)

    def write(self, items: Sequence[tuple[Checkpoint, int | None]]) -> dict[str, int | KazooException]:
        self.transactions += 1
        out: dict[str, int | KazooException] = {}
        for cp, version in items:
            current = self.nodes.get(cp.group)
            if version is None and current is not None:
                out[cp.group] = NodeExistsError()
            elif version is not None and (current is None or current[1] != version):
                out[cp.group] = BadVersionError()
            else:
                new = 0 if current is None else current[1] + 1
                self.nodes[cp.group] = (group_checkpoint.encode(cp), new)
                out[cp.group] = new
        return out


class FakeRegistry:
    def __init__(self, ids: Iterable[int]) -> None:
        self.listeners: list[Callable[[ClusterSnapshot], None]] = []
        self.snapshot = self._snapshot(ids)

    @staticmethod
    def _snapshot(ids: Iterable[int]) -> ClusterSnapshot:
        return ClusterSnapshot({i: BrokerRegistration(i, f"b{i}", f"b{i}.example", 9092, 9093) for i in ids})

    def add_listener(self, listener: Callable[[ClusterSnapshot], None]) -> None:
        self.listeners.append(listener)

    def set(self, ids: Iterable[int]) -> None:
        self.snapshot = self._snapshot(ids)
        for listener in self.listeners:
            listener(self.snapshot)


class Node:
    """One broker: a coordinator (Harness, topic t with messages) and its placement over a shared store."""

    def __init__(self, broker_id: int, store: FakeStore, ids: Iterable[int], *, instance: str | None = None,
                 harness: Harness | None = None, handover_timeout_ms: int = 300, apply: bool = True) -> None:
        self.id = broker_id
        self.h = harness or Harness({"t": 1})
        if harness is None:
            self.h.catalog.append("t", 0, [10] * 10)
        self.registry = FakeRegistry(ids)
        self.placement = GroupPlacement(self.h.coord, self.h.persist,
                                        pb.Broker(broker_id=broker_id, host=f"b{broker_id}.example", grpc_port=9093),
                                        instance or f"instance-{broker_id}", interval_ms=1000,
                                        handover_timeout_ms=handover_timeout_ms)
        self.placement.start(None, self.registry, store=store, run=False)  # type: ignore[arg-type]
        if apply:
            self.placement.apply_placement()

    def view(self, ids: Iterable[int]) -> None:
        self.registry.set(ids)
        self.placement.apply_placement()

    def commit(self, group: str, offset: int) -> int:
        response = self.h.call(self.h.coord.commit_offsets, pb.CommitOffsetsRequest(
            consumer_group=group, offsets=[pb.PartitionOffset(topic="t", partition=0, offset=offset)]))
        return int(response.error_code)

    def committed(self, group: str) -> int | None:
        snap = self.h.coord.export(group)
        return None if snap is None else dict(((t, p), o) for t, p, o in snap.offsets).get(("t", 0), -1)


def group_on(ids: Sequence[int], broker: int, *, then: tuple[Sequence[int], int] | None = None) -> str:
    """A group name placed on ``broker`` among ``ids`` (and, with ``then``, on then[1] among then[0])."""
    for n in range(10_000):
        name = f"g{n}"
        if coordinator_for(name, ids) == broker and (then is None or coordinator_for(name, then[0]) == then[1]):
            return name
    raise AssertionError("no such group name")
