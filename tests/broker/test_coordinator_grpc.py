"""The group coordinator and admin services over real gRPC, driven from the proto stubs alone."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from rill.client.protocol import requests as rq
from rill.client.protocol.messages import encode_message_set
from rill.v1 import admin_pb2 as apb
from rill.v1 import admin_pb2_grpc as apb_grpc
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import coordinator_pb2_grpc as pb_grpc

from tests.conftest import RawClient

TIMEOUT = 10.0


@pytest.fixture
def channel(broker) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(broker.grpc_address) as ch:
        yield ch


@pytest.fixture
def stub(channel) -> pb_grpc.GroupCoordinatorStub:
    return pb_grpc.GroupCoordinatorStub(channel)


@pytest.fixture
def admin(channel) -> apb_grpc.AdminStub:
    return apb_grpc.AdminStub(channel)


def produce(broker, topic: str, partition: int, payloads: list[bytes]) -> rq.PartitionAck:
    client = RawClient(broker.host, broker.port)
    body = client.request(rq.encode_produce_ack([rq.ProduceRequest(topic, partition, encode_message_set(payloads))]))
    client.close()
    return rq.decode_produce_ack_response(body)[1][0]


def create(stub, group: str, topics: list[str], **kw) -> pb.CreateGroupResponse:
    req = pb.CreateGroupRequest(client_id="t", consumer_group=group, session_timeout=kw.pop("session_timeout", 10_000),
                                topics=topics, **kw)
    return stub.CreateGroup(req, timeout=TIMEOUT)


def register(stub, group: str, consumer_id: str = "", **kw) -> pb.RegisterConsumerResponse:
    return stub.RegisterConsumer(pb.RegisterConsumerRequest(client_id="c", consumer_group=group,
                                                            consumer_id=consumer_id, **kw), timeout=TIMEOUT)


def owned(response: pb.RegisterConsumerResponse) -> set[tuple[str, int]]:
    return {(p.topic, p.partition) for p in response.partitions_to_own}


def coordinator_timer_caught_up(broker) -> None:
    """Wait until the coordinator's timer ran what is due now (a new topic's rebalance is posted there)."""
    done = threading.Event()
    broker.broker.coordination.timer.schedule(0, done.set)
    assert done.wait(TIMEOUT)


def test_health_and_reflection_are_on(channel) -> None:
    """grpc.health.v1 reports SERVING and reflection lists both rill services."""
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "rill.v1.GroupCoordinator", "rill.v1.Admin"):
        status = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT).status
        assert status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(channel)
    answer = next(iter(refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                                timeout=TIMEOUT)))
    names = {s.name for s in answer.list_services_response.service}
    assert {"rill.v1.GroupCoordinator", "rill.v1.Admin"} <= names


def test_create_list_and_register_a_single_consumer(broker, stub) -> None:
    """One consumer gets every partition with offset -1, and ListGroups names the coordinator."""
    produce(broker, "orders", 0, [b"x"])
    created = create(stub, "g1", ["orders"])
    assert created.error_code == pb.NONE and created.coordinator.port == broker.port
    joined = register(stub, "g1")
    assert joined.error_code == pb.NONE and joined.consumer_id
    assert owned(joined) == {("orders", 0), ("orders", 1)}
    assert all(p.offset == -1 for p in joined.partitions_to_own)
    listed = stub.ListGroups(pb.ListGroupsRequest(consumer_groups=["g1", "nope"]), timeout=TIMEOUT).groups_info
    assert listed[0].group_name == "g1" and list(listed[0].group_members) == [joined.consumer_id]
    assert listed[0].controller_broker.grpc_port == broker.grpc_port
    assert listed[1].error_code == pb.GROUP_NOT_FOUND


def test_second_member_triggers_the_seed_003_rebalance(broker, stub) -> None:
    """The first member learns of the join through its heartbeat, re-registers, and both split the partitions."""
    produce(broker, "split", 0, [b"x"])
    create(stub, "g2", ["split"])
    first = register(stub, "g2")
    results: dict[str, pb.RegisterConsumerResponse] = {}
    joiner = threading.Thread(target=lambda: results.setdefault("second", register(stub, "g2")))
    joiner.start()
    deadline = time.monotonic() + TIMEOUT
    while True:
        beat = stub.Heartbeat(pb.HeartbeatRequest(consumer_group="g2", consumer_id=first.consumer_id,
                                                  generation=first.generation), timeout=TIMEOUT)
        if beat.error_code == pb.REBALANCE_IN_PROGRESS or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert beat.error_code == pb.REBALANCE_IN_PROGRESS
    again = register(stub, "g2", first.consumer_id)
    joiner.join(TIMEOUT)
    second = results["second"]
    assert again.generation == second.generation > first.generation
    assert owned(again) | owned(second) == {("split", 0), ("split", 1)}
    assert not owned(again) & owned(second)
    beat = stub.Heartbeat(pb.HeartbeatRequest(consumer_group="g2", consumer_id=first.consumer_id,
                                              generation=first.generation), timeout=TIMEOUT)
    assert beat.error_code == pb.ILLEGAL_GENERATION


def test_commit_fetch_and_stale_generation(broker, stub) -> None:
    """A member's commit is stored; a commit with an old generation or by a non-member for its partition is refused."""
    ack = produce(broker, "c", 0, [b"a", b"b"])
    create(stub, "g3", ["c"])
    member = register(stub, "g3")
    commit = stub.CommitOffsets(pb.CommitOffsetsRequest(
        consumer_group="g3", consumer_id=member.consumer_id, generation=member.generation,
        offsets=[pb.PartitionOffset(topic="c", partition=0, offset=ack.next_offset)]), timeout=TIMEOUT)
    assert commit.error_code == pb.NONE
    fetched = stub.FetchOffsets(pb.FetchOffsetsRequest(consumer_group="g3",
                                                       partitions=[pb.TopicPartition(topic="c", partition=0)]),
                                timeout=TIMEOUT)
    assert [(o.topic, o.partition, o.offset) for o in fetched.offsets] == [("c", 0, ack.next_offset)]
    stale = stub.CommitOffsets(pb.CommitOffsetsRequest(
        consumer_group="g3", consumer_id=member.consumer_id, generation=member.generation - 1,
        offsets=[pb.PartitionOffset(topic="c", partition=0, offset=0)]), timeout=TIMEOUT)
    assert stale.error_code == pb.ILLEGAL_GENERATION
    outsider = stub.CommitOffsets(pb.CommitOffsetsRequest(
        consumer_group="g3", offsets=[pb.PartitionOffset(topic="c", partition=0, offset=0)]), timeout=TIMEOUT)
    assert outsider.error_code == pb.NOT_OWNER
    unchanged = stub.FetchOffsets(pb.FetchOffsetsRequest(consumer_group="g3"), timeout=TIMEOUT)
    assert {(o.topic, o.partition): o.offset for o in unchanged.offsets}[("c", 0)] == ack.next_offset


def test_rewind_a_live_group(broker, stub) -> None:
    """RewindConsumer moves a live owner: its heartbeat says re-register, and it gets the new offset."""
    first = produce(broker, "r", 0, [b"one"])
    produce(broker, "r", 0, [b"two"])
    create(stub, "g4", ["r"])
    member = register(stub, "g4")
    end = produce(broker, "r", 0, [b"three"]).next_offset
    stub.CommitOffsets(pb.CommitOffsetsRequest(consumer_group="g4", consumer_id=member.consumer_id,
                                               generation=member.generation,
                                               offsets=[pb.PartitionOffset(topic="r", partition=0, offset=end)]),
                       timeout=TIMEOUT)
    rewound = stub.RewindConsumer(pb.RewindConsumerRequest(
        consumer_group="g4", new_offsets=[pb.PartitionOffset(topic="r", partition=0, offset=first.next_offset)]),
        timeout=TIMEOUT)
    assert rewound.error_code == pb.NONE
    assert [(o.topic, o.partition, o.offset) for o in rewound.actual_offsets] == [("r", 0, first.next_offset)]
    beat = stub.Heartbeat(pb.HeartbeatRequest(consumer_group="g4", consumer_id=member.consumer_id,
                                              generation=member.generation), timeout=TIMEOUT)
    assert beat.error_code == pb.REBALANCE_IN_PROGRESS
    again = register(stub, "g4", member.consumer_id)
    assert {(p.topic, p.partition): p.offset for p in again.partitions_to_own}[("r", 0)] == first.next_offset


def test_rewind_is_all_or_nothing(broker, stub) -> None:
    """One bad entry (an offset past the log end) moves nothing and is named in the response."""
    produce(broker, "aon", 0, [b"x"])
    produce(broker, "aon", 1, [b"y"])
    create(stub, "g5", ["aon"])
    bad = stub.RewindConsumer(pb.RewindConsumerRequest(consumer_group="g5", new_offsets=[
        pb.PartitionOffset(topic="aon", partition=0, offset=0),
        pb.PartitionOffset(topic="aon", partition=1, offset=10_000)]), timeout=TIMEOUT)
    assert bad.error_code != pb.NONE
    assert {o.partition: o.error_code for o in bad.actual_offsets}[1] == pb.OFFSET_OUT_OF_RANGE
    offsets = stub.FetchOffsets(pb.FetchOffsetsRequest(consumer_group="g5"), timeout=TIMEOUT).offsets
    assert all(o.offset == -1 for o in offsets)


def test_bad_input_gets_error_codes(broker, stub) -> None:
    """Unknown group, bad session timeout, bad strategy, unknown member, group with members: specific codes."""
    assert register(stub, "missing").error_code == pb.GROUP_NOT_FOUND
    assert create(stub, "g6", ["t"], session_timeout=1).error_code == pb.INVALID_SESSION_TIMEOUT
    assert create(stub, "g6", ["t"], assignment_strategy="nonsense").error_code == pb.INVALID_ASSIGNMENT_STRATEGY
    assert create(stub, "bad/name", ["t"]).error_code == pb.INVALID_GROUP_NAME
    create(stub, "g7", ["t"])
    beat = stub.Heartbeat(pb.HeartbeatRequest(consumer_group="g7", consumer_id="ghost", generation=1), timeout=TIMEOUT)
    assert beat.error_code == pb.UNKNOWN_MEMBER
    register(stub, "g7")
    deleted = stub.DeleteGroup(pb.DeleteGroupRequest(consumer_group=["g7"]), timeout=TIMEOUT)
    assert deleted.error_code == pb.GROUP_NOT_EMPTY and not deleted.deleted_consumer_groups


def test_create_refuses_a_rebalance_timeout_above_the_max_session_timeout(broker, stub) -> None:
    """A rebalance timeout above group.max.session.timeout.ms (2^62 too) is INVALID_REQUEST and creates nothing."""
    bound = broker.broker.config["group.max.session.timeout.ms"]
    for timeout in (2**62, bound + 1):
        assert create(stub, "rb", ["t"], rebalance_timeout=timeout).error_code == pb.INVALID_REQUEST
    listed = stub.ListGroups(pb.ListGroupsRequest(consumer_groups=["rb"]), timeout=TIMEOUT)
    assert listed.error_code == pb.GROUP_NOT_FOUND
    assert create(stub, "rb", ["t"], rebalance_timeout=bound).error_code == pb.NONE


def test_rewind_to_a_negative_timestamp_is_refused(broker, stub) -> None:
    """RewindConsumer to TIMESTAMP -1 or -2^63 is INVALID_REQUEST and moves nothing (not Kafka's -1 = latest)."""
    produce(broker, "neg", 0, [b"a", b"b"])
    create(stub, "g11", ["neg"])
    committed = stub.CommitOffsets(pb.CommitOffsetsRequest(
        consumer_group="g11", offsets=[pb.PartitionOffset(topic="neg", partition=0, offset=0)]), timeout=TIMEOUT)
    assert committed.error_code == pb.NONE
    for timestamp in (-1, -2**63):
        rewound = stub.RewindConsumer(pb.RewindConsumerRequest(
            consumer_group="g11", target=pb.TIMESTAMP, timestamp=timestamp,
            new_offsets=[pb.PartitionOffset(topic="neg", partition=0)]), timeout=TIMEOUT)
        assert rewound.error_code == pb.INVALID_REQUEST
    fetched = stub.FetchOffsets(pb.FetchOffsetsRequest(consumer_group="g11"), timeout=TIMEOUT)
    assert {(o.topic, o.partition): o.offset for o in fetched.offsets} == {("neg", 0): 0}


def test_member_commit_for_an_unknown_topic_or_partition(broker, stub) -> None:
    """A member's commit for a missing topic or partition gets UNKNOWN_TOPIC_OR_PARTITION (not NOT_OWNER), all or nothing."""
    ack = produce(broker, "known", 0, [b"x"])
    create(stub, "g12", ["known"])
    member = register(stub, "g12")
    assert ("known", 0) in owned(member)
    commit = stub.CommitOffsets(pb.CommitOffsetsRequest(
        consumer_group="g12", consumer_id=member.consumer_id, generation=member.generation, offsets=[
            pb.PartitionOffset(topic="known", partition=0, offset=ack.next_offset),
            pb.PartitionOffset(topic="no-such-topic", partition=0, offset=0),
            pb.PartitionOffset(topic="known", partition=7, offset=0)]), timeout=TIMEOUT)
    assert commit.error_code == pb.UNKNOWN_TOPIC_OR_PARTITION
    assert [o.error_code for o in commit.offsets] == [
        pb.NONE, pb.UNKNOWN_TOPIC_OR_PARTITION, pb.UNKNOWN_TOPIC_OR_PARTITION]
    fetched = stub.FetchOffsets(pb.FetchOffsetsRequest(consumer_group="g12"), timeout=TIMEOUT)
    assert all(o.offset == -1 for o in fetched.offsets)


def test_admin_topics_cluster_and_group_lag(broker, stub, admin) -> None:
    """Admin describes topics with offsets, the cluster, and a group's lag in bytes and seconds."""
    ack = produce(broker, "lag", 0, [b"m" * 10] * 3)
    created = admin.CreateTopic(apb.CreateTopicRequest(topic="made", partitions=3), timeout=TIMEOUT)
    assert created.error_code == pb.NONE and created.topic.partition_count == 3
    assert admin.CreateTopic(apb.CreateTopicRequest(topic="../x", partitions=1), timeout=TIMEOUT).error_code \
        == pb.INVALID_TOPIC
    topics = {t.topic: t for t in admin.DescribeTopics(apb.DescribeTopicsRequest(), timeout=TIMEOUT).topics}
    assert topics["lag"].partitions[0].end_offset == ack.next_offset
    create(stub, "g8", ["lag"])
    cluster = admin.DescribeCluster(apb.DescribeClusterRequest(), timeout=TIMEOUT)
    assert [b.port for b in cluster.brokers] == [broker.port]
    assert ("g8", cluster.brokers[0].broker_id) in {(c.consumer_group, c.coordinator_broker_id)
                                                   for c in cluster.coordinators}
    time.sleep(0.05)
    described = admin.DescribeGroup(apb.DescribeGroupRequest(consumer_group="g8"), timeout=TIMEOUT)
    lag = {(p.topic, p.partition): p for p in described.partitions}[("lag", 0)]
    assert lag.committed_offset == -1 and lag.lag_bytes == ack.next_offset
    assert lag.lag_seconds > 0
    assert admin.DescribeGroup(apb.DescribeGroupRequest(consumer_group="nope"), timeout=TIMEOUT).error_code \
        == pb.GROUP_NOT_FOUND


def test_leave_group_rebalances_the_rest_at_once(broker, stub) -> None:
    """A member that leaves is gone at once; the other's heartbeat says re-register and it gets everything."""
    produce(broker, "lv", 0, [b"x"])
    create(stub, "g9", ["lv"])
    first = register(stub, "g9")
    results: dict[str, pb.RegisterConsumerResponse] = {}
    joiner = threading.Thread(target=lambda: results.setdefault("second", register(stub, "g9")))
    joiner.start()
    while stub.Heartbeat(pb.HeartbeatRequest(consumer_group="g9", consumer_id=first.consumer_id,
                                             generation=first.generation), timeout=TIMEOUT).error_code == pb.NONE:
        time.sleep(0.02)
    first = register(stub, "g9", first.consumer_id)
    joiner.join(TIMEOUT)
    second = results["second"]
    left = stub.LeaveGroup(pb.LeaveGroupRequest(consumer_group="g9", consumer_id=second.consumer_id), timeout=TIMEOUT)
    assert left.error_code == pb.NONE
    beat = stub.Heartbeat(pb.HeartbeatRequest(consumer_group="g9", consumer_id=first.consumer_id,
                                              generation=first.generation), timeout=TIMEOUT)
    assert beat.error_code == pb.REBALANCE_IN_PROGRESS
    alone = register(stub, "g9", first.consumer_id)
    assert owned(alone) == {("lv", 0), ("lv", 1)}
    gone = stub.LeaveGroup(pb.LeaveGroupRequest(consumer_group="g9", consumer_id=second.consumer_id), timeout=TIMEOUT)
    assert gone.error_code == pb.UNKNOWN_MEMBER


def test_a_new_subscribed_topic_triggers_a_rebalance(broker, stub) -> None:
    """Producing to a topic the group subscribes to (auto-creating it) makes members re-register and own it,
    from offset 0 (seed 003: a new topic starts at the smallest offset)."""
    create(stub, "g10", ["arrives-later"])
    member = register(stub, "g10")
    assert owned(member) == set()
    produce(broker, "arrives-later", 0, [b"first"])
    coordinator_timer_caught_up(broker)
    beat = stub.Heartbeat(pb.HeartbeatRequest(consumer_group="g10", consumer_id=member.consumer_id,
                                              generation=member.generation), timeout=TIMEOUT)
    assert beat.error_code == pb.REBALANCE_IN_PROGRESS
    again = register(stub, "g10", member.consumer_id)
    assert owned(again) == {("arrives-later", 0), ("arrives-later", 1)}
    assert all(p.offset == 0 for p in again.partitions_to_own)
