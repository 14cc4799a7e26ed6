"""Groups in a cluster of in-process brokers on a real ZooKeeper: one coordinator per group, named by every broker."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import grpc
import pytest
import structlog
from kazoo.client import KazooClient

from rill.broker.testing import RunningBroker
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import encode_message_set
from rill.coordinator import group_checkpoint
from rill.coordinator.placement import coordinator_for
from rill.v1 import admin_pb2 as apb
from rill.v1 import admin_pb2_grpc as apb_grpc
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import coordinator_pb2_grpc as pb_grpc
from tests.conftest import RawClient
from tests.zookeeper.test_broker_registration import wait_for, zk_broker

INTERVAL_MS = 200
GROUPS = [f"group-{i}" for i in range(8)]


def produce(b: RunningBroker, topic: str, partition: int, payloads: list[bytes]) -> int:
    """Produce with an acknowledgement; the offset after the last message."""
    raw = RawClient(b.host, b.port)
    try:
        body = raw.request(rq.encode_produce_ack([rq.ProduceRequest(topic, partition, encode_message_set(payloads))], 1))
        error, acks = rq.decode_produce_ack_response(body)
        assert error == 0 and acks[0].error == 0, acks
        return acks[0].next_offset
    finally:
        raw.close()


def settled(brokers: dict[int, RunningBroker]) -> bool:
    """Has every broker applied a placement over all of them?"""
    ids = frozenset(brokers)
    return all(b.broker.coordination.placement is not None
               and b.broker.coordination.placement.applied_brokers == ids for b in brokers.values())


@contextmanager
def cluster(tmp_path: Path, zk_connect: str, ids: list[int]) -> Iterator[dict[int, RunningBroker]]:
    with ExitStack() as stack:
        brokers = {i: stack.enter_context(zk_broker(tmp_path, zk_connect, broker_id=i, num_partitions=1,
                                                    offsets_checkpoint_interval_ms=INTERVAL_MS)) for i in ids}
        wait_for(lambda: settled(brokers), what="every broker to place groups over the whole cluster")
        yield brokers


def stub(b: RunningBroker, stack: ExitStack) -> pb_grpc.GroupCoordinatorStub:
    channel = stack.enter_context(grpc.insecure_channel(b.grpc_address))
    return pb_grpc.GroupCoordinatorStub(channel)  # type: ignore[no-untyped-call]


def test_every_broker_names_the_same_coordinator(tmp_path: Path, zk_connect: str) -> None:
    """CreateGroup at any broker lands on the rendezvous-chosen broker, and ListGroups at every broker names it."""
    with cluster(tmp_path, zk_connect, [1, 2, 3]) as brokers, ExitStack() as stack:
        stubs = {i: stub(b, stack) for i, b in brokers.items()}
        expected = {g: coordinator_for(g, brokers) for g in GROUPS}
        assert len(set(expected.values())) > 1  # the groups are spread over several brokers
        for i, g in enumerate(GROUPS):
            created = stubs[1 + i % 3].CreateGroup(pb.CreateGroupRequest(consumer_group=g, session_timeout=10_000))
            assert created.error_code == pb.NONE, g
            assert created.coordinator.broker_id == expected[g]
        for i, s in stubs.items():
            listing = s.ListGroups(pb.ListGroupsRequest(consumer_groups=GROUPS))
            assert listing.error_code == pb.NONE
            for info in listing.groups_info:
                owner = brokers[expected[info.group_name]]
                assert (info.controller_broker.broker_id, info.controller_broker.host,
                        info.controller_broker.port, info.controller_broker.grpc_port) == (
                    expected[info.group_name], "127.0.0.1", owner.port, owner.grpc_port), (i, info)
                assert info.session_timeout == 10_000
        for b in brokers.values():  # the checkpoints reach ZooKeeper within an interval or two
            wait_for(lambda: {i.group_name: i.controller_broker.broker_id for i in stubs[b.broker.config["broker.id"]]
                              .ListGroups(pb.ListGroupsRequest()).groups_info} == expected,
                     what="every broker to list every group with its coordinator")


def test_list_groups_names_where_a_new_group_would_live(tmp_path: Path, zk_connect: str) -> None:
    """A group that does not exist yet is GROUP_NOT_FOUND with the broker that would coordinate it, from any broker."""
    with cluster(tmp_path, zk_connect, [1, 2]) as brokers, ExitStack() as stack:
        names = [f"not-yet-{i}" for i in range(6)]
        expected = {g: coordinator_for(g, brokers) for g in names}
        assert set(expected.values()) == {1, 2}
        for b in brokers.values():
            listing = stub(b, stack).ListGroups(pb.ListGroupsRequest(consumer_groups=names))
            assert {i.group_name: (i.error_code, i.controller_broker.broker_id, i.controller_broker.grpc_port)
                    for i in listing.groups_info} == {
                g: (pb.GROUP_NOT_FOUND, expected[g], brokers[expected[g]].grpc_port) for g in names}


def test_non_coordinators_answer_not_coordinator(tmp_path: Path, zk_connect: str) -> None:
    """Every group RPC (and Admin DescribeGroup) at a broker that does not coordinate the group is NOT_COORDINATOR."""
    with cluster(tmp_path, zk_connect, [1, 2]) as brokers, ExitStack() as stack:
        g = "orders-app"
        owner = coordinator_for(g, brokers)
        other = next(i for i in brokers if i != owner)
        s = stub(brokers[other], stack)
        admin = apb_grpc.AdminStub(stack.enter_context(grpc.insecure_channel(brokers[other].grpc_address)))  # type: ignore[no-untyped-call]
        assert stub(brokers[owner], stack).CreateGroup(pb.CreateGroupRequest(consumer_group=g)).error_code == pb.NONE
        offsets = [pb.PartitionOffset(topic="t", partition=0, offset=0)]
        codes = {
            "Heartbeat": s.Heartbeat(pb.HeartbeatRequest(consumer_group=g, consumer_id="x", generation=1)).error_code,
            "CommitOffsets": s.CommitOffsets(pb.CommitOffsetsRequest(consumer_group=g, offsets=offsets)).error_code,
            "FetchOffsets": s.FetchOffsets(pb.FetchOffsetsRequest(consumer_group=g)).error_code,
            "RegisterConsumer": s.RegisterConsumer(pb.RegisterConsumerRequest(consumer_group=g), timeout=10).error_code,
            "LeaveGroup": s.LeaveGroup(pb.LeaveGroupRequest(consumer_group=g, consumer_id="x")).error_code,
            "RewindConsumer": s.RewindConsumer(pb.RewindConsumerRequest(consumer_group=g, new_offsets=offsets)).error_code,
            "RewindConsumer(dry_run)": s.RewindConsumer(pb.RewindConsumerRequest(
                consumer_group=g, new_offsets=offsets, dry_run=True)).error_code,
            "DeleteGroup": s.DeleteGroup(pb.DeleteGroupRequest(consumer_group=[g])).error_code,
            "DescribeGroup": admin.DescribeGroup(apb.DescribeGroupRequest(consumer_group=g)).error_code,
        }
        assert codes == dict.fromkeys(codes, pb.NOT_COORDINATOR)
        described = admin.DescribeGroup(apb.DescribeGroupRequest(consumer_group=g))
        assert described.coordinator.broker_id == owner
        # the group is still there, at its coordinator
        listing = stub(brokers[owner], stack).ListGroups(pb.ListGroupsRequest(consumer_groups=[g]))
        assert listing.groups_info[0].error_code == pb.NONE


def test_lag_seconds_of_partitions_on_other_brokers(tmp_path: Path, zk_connect: str) -> None:
    """DescribeGroup gives lag in seconds for every partition, also those on brokers other than the coordinator."""
    with cluster(tmp_path, zk_connect, [1, 2]) as brokers, ExitStack() as stack:
        for b in brokers.values():
            produce(b, "t", 0, [b"x" * 50] * 20)  # partition 0 of each broker: cluster-wide 0 and 1
        g = "lagging"
        owner = coordinator_for(g, brokers)
        offsets = [pb.PartitionOffset(topic="t", partition=p, offset=0) for p in (0, 1)]

        def committed() -> bool:
            reply = stub(brokers[owner], stack).CommitOffsets(pb.CommitOffsetsRequest(consumer_group=g, offsets=offsets))
            return bool(reply.error_code == pb.NONE)
        wait_for(committed, what="both partitions of t in the cluster-wide map")
        admin = apb_grpc.AdminStub(stack.enter_context(grpc.insecure_channel(brokers[owner].grpc_address)))  # type: ignore[no-untyped-call]
        lags = {p.partition: p for p in admin.DescribeGroup(apb.DescribeGroupRequest(consumer_group=g)).partitions}
        assert set(lags) == {0, 1}
        for lag in lags.values():
            assert lag.end_offset == lag.lag_bytes > 0 and 0 < lag.lag_seconds < 60, lag  # -1: unknown


def test_graceful_move_keeps_every_commit(tmp_path: Path, zk_connect: str, zk: KazooClient) -> None:
    """A group whose coordinator shuts down cleanly continues on another broker with its last commit, however recent."""
    ids = [1, 2, 3]
    with ExitStack() as outer:
        brokers = {i: outer.enter_context(zk_broker(tmp_path, zk_connect, broker_id=i, num_partitions=1,
                                                    offsets_checkpoint_interval_ms=60_000)) for i in ids}
        wait_for(lambda: settled(brokers), what="placement over the whole cluster")
        g = next(f"app-{n}" for n in range(100) if coordinator_for(f"app-{n}", ids) == 3)
        # the same messages on every broker: the offset is a message boundary at any coordinator
        ends = {produce(b, "t", 0, [b"a" * 10, b"b" * 10, b"c" * 10]) for b in brokers.values()}
        assert len(ends) == 1
        end = ends.pop()
        with grpc.insecure_channel(brokers[3].grpc_address) as channel:
            s = pb_grpc.GroupCoordinatorStub(channel)  # type: ignore[no-untyped-call]
            commit = s.CommitOffsets(pb.CommitOffsetsRequest(
                consumer_group=g, offsets=[pb.PartitionOffset(topic="t", partition=0, offset=end)]))
            assert commit.error_code == pb.NONE
        # the checkpoint interval (60 s) has not passed: only the release on shutdown carries the commit
        last = brokers.pop(3)
        last.broker.stop()
        last.thread.join(timeout=30)
        with structlog.testing.capture_logs() as logs:
            last.broker.close()
        assert any(e["event"] == "group.checkpoint_released" and e["group"] == g for e in logs)
        successor = coordinator_for(g, [1, 2])
        assert successor is not None
        cp = group_checkpoint.decode(zk.get(f"/rill/groups/{g}")[0])  # the release, or already the successor's claim
        assert cp.writer.broker_id in (3, successor) and cp.snapshot is not None
        assert cp.snapshot.offsets == (("t", 0, end),)
        wait_for(lambda: settled(brokers), what="placement over the two brokers left")
        with grpc.insecure_channel(brokers[successor].grpc_address) as channel:
            s = pb_grpc.GroupCoordinatorStub(channel)  # type: ignore[no-untyped-call]
            fetched = s.FetchOffsets(pb.FetchOffsetsRequest(consumer_group=g))
            assert fetched.error_code == pb.NONE
            assert [(o.topic, o.partition, o.offset) for o in fetched.offsets] == [("t", 0, end)]
        cp = group_checkpoint.decode(zk.get(f"/rill/groups/{g}")[0])
        assert cp.writer.broker_id == successor and not cp.released  # the successor's claim


@pytest.mark.slow
def test_broker_stops_promptly_while_zookeeper_is_unreachable(tmp_path: Path) -> None:
    """A broker coordinating groups must stop even when ZooKeeper is gone: the final checkpoint is skipped, logged."""
    import time

    from structlog.testing import capture_logs

    from tests.zk import ZkServer
    from tests.zookeeper.test_broker_registration import zk_broker as start

    with ZkServer(tmp_path / "zk") as server:
        with capture_logs() as logs:
            with start(tmp_path, server.address, broker_id=1, zookeeper_session_timeout_ms=4000,
                       offsets_checkpoint_interval_ms=INTERVAL_MS) as b:
                wait_for(lambda: b.broker.registry is not None and 1 in b.broker.registry.snapshot.brokers,
                         what="registered")
                with grpc.insecure_channel(b.grpc_address) as channel:
                    coordinator = pb_grpc.GroupCoordinatorStub(channel)  # type: ignore[no-untyped-call]
                    request = pb.CreateGroupRequest(consumer_group="g", session_timeout=10_000)
                    # NOT_COORDINATOR until the broker has applied a placement that includes itself
                    wait_for(lambda: coordinator.CreateGroup(request, timeout=10).error_code == pb.NONE,
                             what="the group created here")
                server.stop()
                started = time.monotonic()
                b.close()
                assert time.monotonic() - started < 8
        events = [e["event"] for e in logs]
        assert "group.release_skipped" in events or "group.release_timed_out" in events, events
        assert "broker.stopped" in events
