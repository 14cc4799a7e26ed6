"""Test harness: a coordinator on a fake clock and an in-memory catalog, with helpers that persist-then-apply."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rill.coordinator.topic_catalog import StaticCatalog
from rill.client.clock import FakeClock, FakeTimer
from rill.coordinator.group_coordinator import GroupCoordinator
from rill.coordinator.describe import GroupDescription
from rill.coordinator.pending import PendingJoin
from rill.coordinator.records import Record
from rill.v1 import coordinator_pb2 as pb

BROKER = pb.Broker(broker_id=7, host="coordinator.example", port=9092, grpc_port=9093)
TIMEOUT_MS = 10_000


class Harness:
    """One coordinator; every record it produces goes to ``records`` and is then applied."""

    def __init__(self, topics: Mapping[str, int] | None = None, **limits: Any) -> None:
        self.clock = FakeClock()
        self.timer = FakeTimer(self.clock)
        self.catalog = StaticCatalog({"t": 4} if topics is None else topics)
        self.coord = GroupCoordinator(self.catalog, self.clock, self.timer, BROKER, **limits)
        self.records: list[Record] = []
        self.coord.set_sink(self.persist)

    def persist(self, records: Iterable[Record]) -> None:
        records = list(records)
        self.records.extend(records)
        self.coord.apply(records)

    def call(self, handler: Any, request: Any) -> Any:
        response, records = handler(request)
        self.persist(records)
        return response

    def create(self, group: str = "g", topics: Iterable[str] = ("t",), session_timeout: int = TIMEOUT_MS,
               **kw: Any) -> pb.CreateGroupResponse:
        response: pb.CreateGroupResponse = self.call(self.coord.create_group, pb.CreateGroupRequest(
            client_id="admin", consumer_group=group, session_timeout=session_timeout, topics=list(topics), **kw))
        return response

    def register(self, group: str = "g", consumer_id: str = "", client_id: str = "c",
                 static: Iterable[tuple[str, int]] = (), **kw: Any) -> PendingJoin:
        join, records = self.coord.register_consumer(pb.RegisterConsumerRequest(
            client_id=client_id, consumer_group=group, consumer_id=consumer_id,
            static_partitions=[pb.TopicPartition(topic=t, partition=p) for t, p in static], **kw))
        self.persist(records)
        return join

    def join(self, group: str = "g", consumer_id: str = "", **kw: Any) -> pb.RegisterConsumerResponse:
        """Register and expect an answer at once."""
        response = self.register(group, consumer_id, **kw).wait(0)
        assert response is not None, "the RegisterConsumer is still waiting"
        return response

    def stable(self, n: int, group: str = "g") -> list[pb.RegisterConsumerResponse]:
        """n members registered and re-registered until the group is STABLE; sorted by consumer id."""
        joins = [self.register(group, client_id=f"c{i}") for i in range(n)]
        for done in [j.response() for j in joins if j.done()]:
            assert done is not None and done.error_code == pb.NONE
            if self.state(group) == "PreparingRebalance":
                joins.append(self.register(group, consumer_id=done.consumer_id))
        final = {}
        for j in joins:
            response = j.response()
            assert response is not None
            final[response.consumer_id] = response
        described = self.coord.describe(group)
        assert described is not None and described.state == "Stable"
        latest = [r for r in final.values() if r.generation == described.generation]
        assert len(latest) == n
        return sorted(latest, key=lambda r: r.consumer_id)

    def heartbeat(self, member: pb.RegisterConsumerResponse, generation: int | None = None,
                  group: str = "g") -> int:
        return int(self.call(self.coord.heartbeat, pb.HeartbeatRequest(
            consumer_group=group, consumer_id=member.consumer_id,
            generation=member.generation if generation is None else generation)).error_code)

    def commit(self, offsets: Mapping[tuple[str, int], int], member: pb.RegisterConsumerResponse | None = None,
               generation: int | None = None, group: str = "g") -> pb.CommitOffsetsResponse:
        response: pb.CommitOffsetsResponse = self.call(self.coord.commit_offsets, pb.CommitOffsetsRequest(
            consumer_group=group, consumer_id=member.consumer_id if member else "",
            generation=(member.generation if member else 0) if generation is None else generation,
            offsets=[pb.PartitionOffset(topic=t, partition=p, offset=o) for (t, p), o in offsets.items()]))
        return response

    def rewind(self, entries: Mapping[tuple[str, int], int], target: Any = pb.OFFSET, timestamp: int = 0,
               group: str = "g") -> pb.RewindConsumerResponse:
        response: pb.RewindConsumerResponse = self.call(self.coord.rewind_consumer, pb.RewindConsumerRequest(
            consumer_group=group, target=target, timestamp=timestamp,
            new_offsets=[pb.PartitionOffset(topic=t, partition=p, offset=o) for (t, p), o in entries.items()]))
        return response

    def fetch(self, group: str = "g") -> dict[tuple[str, int], int]:
        response = self.call(self.coord.fetch_offsets, pb.FetchOffsetsRequest(consumer_group=group))
        assert response.error_code == pb.NONE
        return {(o.topic, o.partition): o.offset for o in response.offsets}

    def leave(self, member: pb.RegisterConsumerResponse, group: str = "g") -> int:
        code, records = self.coord.leave_group(group, member.consumer_id)
        self.persist(records)
        return int(code)

    def described(self, group: str = "g") -> GroupDescription:
        described = self.coord.describe(group)
        assert described is not None, f"no group {group!r}"
        return described

    def state(self, group: str = "g") -> str | None:
        described = self.coord.describe(group)
        return described.state if described else None


def answer(join: PendingJoin) -> pb.RegisterConsumerResponse:
    """The response of a PendingJoin that must be done."""
    response = join.wait(0)
    assert response is not None, "the RegisterConsumer is still waiting"
    return response


def owned(response: pb.RegisterConsumerResponse) -> set[tuple[str, int]]:
    return {(p.topic, p.partition) for p in response.partitions_to_own}


def offsets_of(response: pb.RegisterConsumerResponse) -> dict[tuple[str, int], int]:
    return {(p.topic, p.partition): p.offset for p in response.partitions_to_own}
