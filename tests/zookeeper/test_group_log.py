"""Group state on the internal topic ``__rill_groups``, with in-process brokers on a real ZooKeeper.

The coordinator of a group is the leader of its partition; the topic is internal (read,
never created or written by clients); it waits for enough brokers; leadership moving to
another broker moves the group with every acknowledged commit; and a data directory or
cluster of before the groups topic upgrades in place.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

import grpc
import pytest
from kazoo.client import KazooClient
from structlog.testing import capture_logs

from rill.broker.cluster.checkpoint_store import CheckpointStore
from rill.broker.testing import RunningBroker, running_broker
from rill.client.errors import ErrorCode, InvalidTopic
from rill.client.grpc_client import AdminClient
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import encode_message_set
from rill.client.simple import SimpleConsumer, SimpleProducer
from rill.client.topic_names import GROUPS_TOPIC
from rill.coordinator.group_checkpoint import Checkpoint, Writer, snapshot_of
from rill.coordinator.group_partitioning import partition_for
from rill.coordinator.records import GroupCreated
from rill.client.structs import TopicPartition
from rill.v1 import admin_pb2 as apb
from rill.v1 import admin_pb2_grpc as apb_grpc
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import coordinator_pb2_grpc as pb_grpc
from tests.conftest import RawClient
from tests.zookeeper.test_broker_registration import wait_for, zk_broker

PAYLOAD = [b"one message"]


def stub(b: RunningBroker) -> pb_grpc.GroupCoordinatorStub:
    channel = grpc.insecure_channel(b.grpc_address)
    return pb_grpc.GroupCoordinatorStub(channel)  # type: ignore[no-untyped-call]


def topic_with_one_message(*brokers: RunningBroker) -> int:
    """A 0.7 topic "t" on each broker with the same message: its end, a boundary at every coordinator."""
    ends = set()
    for b in brokers:
        b.broker.logs.create_topic("t", 1)
        ends.add(b.broker.logs.get("t", 0).append(encode_message_set(PAYLOAD)).next_offset)
    assert len(ends) == 1
    return ends.pop()


def coordinator_of(b: RunningBroker, group: str) -> int:
    placement = b.broker.coordination.placement
    assert placement is not None
    found = placement.coordinator(group)
    return -1 if found is None else found.broker_id


def test_groups_topic_is_internal(tmp_path: Path, zk_connect: str) -> None:
    """Clients can read __rill_groups but not create it or write to it, whichever way they try."""
    with zk_broker(tmp_path, zk_connect) as b:
        assert b.broker.coordination.placement.serving_all()  # type: ignore[union-attr]
        with SimpleProducer(b.host, b.port) as producer, pytest.raises(InvalidTopic):
            producer.send(GROUPS_TOPIC, [b"forged"], 0)
        raw = RawClient(b.host, b.port)
        try:
            body = raw.request(rq.encode_create_topic("__rill_other", 1))
            assert rq.decode_create_topic_response(body)[0] == ErrorCode.INVALID_TOPIC
        finally:
            raw.close()
        with grpc.insecure_channel(b.grpc_address) as channel:
            created = apb_grpc.AdminStub(channel).CreateTopic(  # type: ignore[no-untyped-call]
                apb.CreateTopicRequest(topic=GROUPS_TOPIC, partitions=1), timeout=10)
        assert created.error_code == pb.INVALID_TOPIC and "internal" in created.error_message
        with AdminClient(b.grpc_address, timeout=10) as admin:  # the groups topic keeps everything
            altered = admin.alter_topic_config(GROUPS_TOPIC, {"retention.ms": "1000"}, ())
        assert altered.error_code == pb.INVALID_CONFIG and "internal" in altered.error_message
        assert stub(b).CreateGroup(pb.CreateGroupRequest(consumer_group="readable", topics=["t"]),
                                   timeout=10).error_code == pb.NONE
        p = partition_for("readable", 5)
        with SimpleConsumer(b.host, b.port) as consumer:  # operators may read the records
            messages = consumer.fetch(GROUPS_TOPIC, p, 0, 65536)
        assert [json.loads(m.value)["group"] for m in messages] == ["readable"]


def test_no_coordinator_until_enough_brokers_for_the_groups_topic(tmp_path: Path, zk_connect: str) -> None:
    """With offsets.topic.replication.factor 2 a lone broker creates no groups topic and says why;
    a second broker's arrival creates it, and groups get coordinators."""
    with ExitStack() as stack:
        with capture_logs() as logs:
            b1 = stack.enter_context(zk_broker(tmp_path, zk_connect, broker_id=1,
                                               offsets_topic_replication_factor=2))
        assert any(e["event"] == "groups_topic.waiting_for_brokers" for e in logs)
        answer = stub(b1).CreateGroup(pb.CreateGroupRequest(consumer_group="g", topics=["t"]), timeout=10)
        assert answer.error_code == pb.NOT_COORDINATOR and not answer.HasField("coordinator")
        b2 = stack.enter_context(zk_broker(tmp_path, zk_connect, broker_id=2, offsets_topic_replication_factor=2))
        for b in (b1, b2):
            wait_for(b.broker.coordination.placement.serving_all, what="the groups topic led and loaded")  # type: ignore[union-attr]
        assert stub(b1).CreateGroup(pb.CreateGroupRequest(consumer_group="g", topics=["t"]),
                                    timeout=10).error_code == pb.NONE


def test_a_group_moves_with_its_commits_when_its_coordinator_stops(tmp_path: Path, zk_connect: str) -> None:
    """Factor 2: the coordinator's broker stops; the other broker leads the partition, loads it, and
    serves every commit acknowledged before."""
    with ExitStack() as stack:
        b1 = stack.enter_context(zk_broker(tmp_path, zk_connect, broker_id=1, offsets_topic_replication_factor=2))
        b2 = stack.enter_context(zk_broker(tmp_path, zk_connect, broker_id=2, offsets_topic_replication_factor=2))
        for b in (b1, b2):
            wait_for(b.broker.coordination.placement.serving_all, what="the groups topic led and loaded")  # type: ignore[union-attr]
        end = topic_with_one_message(b1, b2)
        group = next(f"app-{n}" for n in range(100) if coordinator_of(b1, f"app-{n}") == 1)
        coordinator, other = stub(b1), stub(b2)
        assert other.CreateGroup(pb.CreateGroupRequest(consumer_group=group, topics=["t"]),
                                 timeout=10).error_code == pb.NONE  # forwarded to broker 1
        committed = coordinator.CommitOffsets(pb.CommitOffsetsRequest(
            consumer_group=group, offsets=[pb.PartitionOffset(topic="t", partition=0, offset=end)]), timeout=10)
        assert committed.error_code == pb.NONE
        assert other.FetchOffsets(pb.FetchOffsetsRequest(consumer_group=group), timeout=10).error_code == \
            pb.NOT_COORDINATOR
        b1.broker.stop()  # a controlled shutdown moves its leaderships first
        b1.thread.join(timeout=30)
        b1.broker.close()

        def served() -> bool:
            answer = other.FetchOffsets(pb.FetchOffsetsRequest(consumer_group=group), timeout=10)
            return answer.error_code == pb.NONE and [(o.topic, o.offset) for o in answer.offsets] == [("t", end)]
        wait_for(served, timeout=20, what="broker 2 serving the group with its commit")
        listing = other.ListGroups(pb.ListGroupsRequest(consumer_groups=[group]), timeout=10).groups_info[0]
        assert listing.controller_broker.broker_id == 2


def test_upgrade_imports_zookeeper_checkpoints_and_the_local_log(tmp_path: Path, zk_connect: str,
                                                                zk: KazooClient) -> None:
    """A data directory of a single broker (groups in its local log), then started in a cluster whose
    ZooKeeper holds checkpoints written by an older version: both sets of groups are served."""
    data = tmp_path / "data-2"
    with running_broker(data, broker_id=2) as alone:
        end = topic_with_one_message(alone)
        assert stub(alone).CreateGroup(pb.CreateGroupRequest(consumer_group="local-app", topics=["t"]),
                                       timeout=10).error_code == pb.NONE
        assert stub(alone).CommitOffsets(pb.CommitOffsetsRequest(consumer_group="local-app", offsets=[
            pb.PartitionOffset(topic="t", partition=0, offset=end)]), timeout=10).error_code == pb.NONE
    settings = GroupCreated("zk-app", 10_000, 0, ("t",), "range", False)
    old = Checkpoint("zk-app", Writer(9, "gone"), 4, snapshot_of(settings, 3, {TopicPartition("t", 0): 0}),
                     True, 0)
    store = CheckpointStore(zk)
    assert isinstance(store.write([(old, None)])["zk-app"], int)
    with running_broker(data, broker_id=2, zookeeper_connect=zk_connect, advertised_host_name="127.0.0.1") as b:
        client = stub(b)
        for group, offset in (("local-app", end), ("zk-app", 0)):
            answer = client.FetchOffsets(pb.FetchOffsetsRequest(consumer_group=group), timeout=10)
            assert answer.error_code == pb.NONE, group
            assert [(o.topic, o.partition, o.offset) for o in answer.offsets] == [("t", 0, offset)], group
        listing = client.ListGroups(pb.ListGroupsRequest(), timeout=10)
        assert sorted(i.group_name for i in listing.groups_info) == ["local-app", "zk-app"]
