"""Group state on the replicated ``__rill_groups`` topic: coordinators are killed with -9, no commit is lost.

Three real ``rill-broker`` processes; the groups topic has factor 3. Committer threads
commit ever larger offsets for six groups through whichever broker ListGroups names,
recording each commit as attempted and, once answered NONE, acknowledged. The
coordinator of one group after another is killed with -9 (and restarted) while they
commit. The check: for every group, the offset its coordinator serves at the end is at
least the last acknowledged commit (nothing acknowledged was lost) and at most the last
attempted one (nothing was invented).

Every channel is rill's (``rill.client.grpc_channels``: a subchannel pool of its own, reconnects
at most 1 s apart): with gRPC's shared pool, a fresh channel to a restarted broker took over
the failed connects of a committer's channel to it while it was down and, still backing off,
failed at once with the old "Connection refused" (CI saw it in the final FetchOffsets).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from kazoo.client import KazooClient

from rill.client.grpc_channels import insecure_channel
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import encode_message_set
from rill.client.topic_names import GROUPS_TOPIC
from rill.coordinator.group_partitioning import partition_for
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import coordinator_pb2_grpc as pb_grpc
from tests.conftest import RawClient
from tests.process.replicated_cluster import BROKERS, Cluster, eventually

GROUP_PARTITIONS = 3
GROUPS = [f"app-{n}" for n in range(6)]
SETTINGS = {"offsets.topic.replication.factor": 3, "offsets.topic.num.partitions": GROUP_PARTITIONS,
            "zookeeper.session.timeout.ms": 2000}


class Committer:
    """Commits ever larger offsets of ``faults-0`` for one group, wherever its coordinator is."""

    def __init__(self, cluster: Cluster, group: str, offsets: list[int]) -> None:
        self.cluster, self.group, self.offsets = cluster, group, offsets
        self.attempted = -1   # index into offsets of the last commit sent
        self.acked = -1       # index of the last commit answered NONE
        self.acked_at: list[float] = []
        self.stop = threading.Event()
        self._channels: dict[int, grpc.Channel] = {}
        self.thread = threading.Thread(target=self._run, name=f"committer-{group}", daemon=True)

    def _stub(self, broker: pb.Broker) -> pb_grpc.GroupCoordinatorStub:
        channel = self._channels.get(broker.grpc_port)
        if channel is None:
            channel = self._channels[broker.grpc_port] = insecure_channel(f"127.0.0.1:{broker.grpc_port}")
        return pb_grpc.GroupCoordinatorStub(channel)  # type: ignore[no-untyped-call]

    def _coordinator(self) -> pb.Broker | None:
        alive = [b for b in BROKERS if self.cluster.alive(b)]
        entry = pb.Broker(broker_id=0, host="127.0.0.1", grpc_port=self.cluster.procs[random.choice(alive)].grpc_port)
        info = self._stub(entry).ListGroups(pb.ListGroupsRequest(consumer_groups=[self.group]), timeout=2).groups_info[0]
        return info.controller_broker if info.HasField("controller_broker") and info.controller_broker.grpc_port else None

    def _run(self) -> None:
        coordinator: pb.Broker | None = None
        while not self.stop.is_set() and self.attempted + 1 < len(self.offsets):
            try:
                coordinator = coordinator or self._coordinator()
                if coordinator is None:
                    self.stop.wait(0.05)
                    continue
                index = self.attempted + 1
                self.attempted = index
                answer = self._stub(coordinator).CommitOffsets(pb.CommitOffsetsRequest(
                    consumer_group=self.group,
                    offsets=[pb.PartitionOffset(topic="faults", partition=0, offset=self.offsets[index])]), timeout=3)
                if answer.error_code == pb.NONE:
                    self.acked = index
                    self.acked_at.append(time.monotonic())
                    continue
                coordinator = None
            except grpc.RpcError:
                coordinator = None
            self.stop.wait(0.05)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        for channel in self._channels.values():
            channel.close()


def produce_boundaries(cluster: Cluster, count: int) -> list[int]:
    """Produce ``count`` messages to faults-0 (acks=all) at its leader; their end offsets."""
    leader = cluster.leader(0)
    raw = RawClient("127.0.0.1", cluster.port(leader))
    ends = []
    try:
        for start in range(0, count, 50):
            for n in range(start, min(count, start + 50)):
                body = raw.request(rq.encode_produce_ack([rq.ProduceRequest(
                    "faults", 0, encode_message_set([b"m%05d" % n]))], rq.Acks.ALL))
                error, acks = rq.decode_produce_ack_response(body)
                assert error == 0 and acks[0].error == 0, acks
                ends.append(acks[0].next_offset)
    finally:
        raw.close()
    return ends


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str, zk: KazooClient) -> Iterator[Cluster]:
    c = Cluster(tmp_path, zk_connect, zk, **SETTINGS)
    try:
        c.start_all()
        c.create(partitions=1)
        eventually(lambda: c.healthy(GROUPS_TOPIC, GROUP_PARTITIONS), 60, "the groups topic led, its ISRs whole")
        yield c
    finally:
        c.stop()


@pytest.mark.slow
def test_no_acknowledged_commit_is_lost_when_coordinators_are_killed(cluster: Cluster) -> None:
    offsets = produce_boundaries(cluster, 3000)
    committers = [Committer(cluster, g, offsets) for g in GROUPS]
    for c in committers:
        with insecure_channel(f"127.0.0.1:{cluster.procs[1].grpc_port}") as channel:
            created = pb_grpc.GroupCoordinatorStub(channel).CreateGroup(  # type: ignore[no-untyped-call]
                pb.CreateGroupRequest(consumer_group=c.group, topics=["faults"]), timeout=30)
            assert created.error_code == pb.NONE, created
        c.thread.start()
    recoveries = []
    try:
        eventually(lambda: all(c.acked >= 20 for c in committers), 30, "every group committing")
        for round_ in range(3):
            group = GROUPS[round_ * 2]
            victim = cluster.leader(partition_for(group, GROUP_PARTITIONS), GROUPS_TOPIC)
            marks = [c.acked for c in committers]
            cluster.kill9(victim)
            killed = time.monotonic()
            eventually(lambda: all(c.acked > m + 5 for c, m in zip(committers, marks)), 40,
                       f"every group committing again after broker {victim} was killed")
            recoveries.append(time.monotonic() - killed)
            cluster.restart(victim)
            eventually(lambda: cluster.healthy(GROUPS_TOPIC, GROUP_PARTITIONS), 60, "the groups topic whole again")
    finally:
        for c in committers:
            c.close()
    for c in committers:
        served = fetch_committed(cluster, c.group)
        assert served in offsets, (c.group, served)
        index = offsets.index(served)
        assert c.acked <= index <= c.attempted, (c.group, c.acked, index, c.attempted)
    print("recoveries_s", [round(r, 2) for r in recoveries], "acked", [c.acked for c in committers])
    assert len(recoveries) == 3 and all(r < 30 for r in recoveries), recoveries


def fetch_committed(cluster: Cluster, group: str) -> int:
    result: list[int] = []

    def fetched() -> bool:
        for b in BROKERS:
            with insecure_channel(f"127.0.0.1:{cluster.procs[b].grpc_port}") as channel:
                answer = pb_grpc.GroupCoordinatorStub(channel).FetchOffsets(  # type: ignore[no-untyped-call]
                    pb.FetchOffsetsRequest(consumer_group=group), timeout=5)
            if answer.error_code == pb.NONE:
                result[:] = [o.offset for o in answer.offsets if o.topic == "faults" and o.partition == 0]
                return True
        return False

    eventually(fetched, 30, f"the coordinator of {group} answering FetchOffsets")
    return result[0]

