"""Deleting a replicated topic and adding partitions to one: three in-process brokers on a real ZooKeeper.

DeleteTopic marks the topic; the controller has every broker delete its replicas (files
included) and forget the topic, then removes the topic's nodes, so clients get
UnknownTopic and a topic created again under the name starts empty. A replica on a
stopped broker holds the deletion until the broker returns, across a controller failover.
CreatePartitions (through a broker that is not the controller) adds partitions with
leaders, and a consumer group rebalances onto them.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from kazoo.client import KazooClient
from structlog.testing import capture_logs

from rill.broker.cluster.partition_states import read_controller, read_states, read_topic
from rill.broker.testing import RunningBroker
from rill.client.cli.main import main
from rill.client.consumer import Consumer
from rill.client.errors import UnknownTopic
from rill.client.grpc_client import AdminClient
from rill.client.protocol import requests as rq
from rill.client.simple import SimpleConsumer, SimpleProducer
from rill.client.zookeeper.replica_layout import delete_marker_path, topic_path
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import coordinator_pb2_grpc as pb_grpc
from tests.zookeeper.replicated_support import (Brokers, cluster_broker, create_replicated, leader_of, produce_acked,
                                                replicated_cluster, wait_leaders)
from tests.zookeeper.test_broker_registration import wait_for

TOPIC = "orders"
SETTINGS = {"auto_create_topics_enable": False}


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[Brokers]:
    with replicated_cluster(tmp_path, zk_connect, **SETTINGS) as brokers:
        yield brokers


def replica_dirs(b: RunningBroker, topic: str) -> list[str]:
    """``b``'s directories of ``topic``'s partitions, those set aside for deletion included."""
    return sorted(n for n in os.listdir(b.broker.logs.data_dir) if n.startswith(f"{topic}-"))


def forgotten(b: RunningBroker, topic: str) -> bool:
    """``b`` holds no replica of ``topic``, its files are gone, and its METADATA does not know it."""
    if any(t == topic for t, _ in b.broker.replicas.replicas) or replica_dirs(b, topic):
        return False
    with SimpleConsumer(b.host, b.port, timeout=5) as consumer:
        return consumer.metadata([topic]).topics[0].error == int(UnknownTopic.code)


def test_delete_removes_every_replica_and_a_new_topic_of_that_name_starts_empty(
        cluster: Brokers, zk: KazooClient, capsys: pytest.CaptureFixture[str]) -> None:
    """DeleteTopic answers once the nodes are gone; every broker deleted its replica files and answers UnknownTopic
    (METADATA, produce); the same name created again has empty partitions; internal and unknown names are refused."""
    create_replicated(zk, cluster, TOPIC, 2)
    acked = {p: produce_acked(cluster, TOPIC, p, [b"old-%d-%d" % (p, i) for i in range(20)]) for p in (0, 1)}
    assert all(replica_dirs(b, TOPIC) == [f"{TOPIC}-0", f"{TOPIC}-1"] for b in cluster.values())
    boundary = acked[0][5][0]  # the offset of partition 0's sixth message
    admin_commit(cluster, "old-readers", [(TOPIC, 0, boundary)])
    assert committed(cluster, "old-readers") == [(TOPIC, 0, boundary)]
    assert main(["topics", "delete", "--grpc", cluster[2].grpc_address, "--topic", TOPIC]) == 0
    assert capsys.readouterr().out == f"Deleted topic {TOPIC} (2 partitions).\n"
    assert zk.exists(topic_path(TOPIC)) is None and zk.exists(delete_marker_path(TOPIC)) is None
    for b in cluster.values():
        wait_for(lambda b=b: forgotten(b, TOPIC), timeout=10, what=f"broker {b.broker_id} to forget {TOPIC}")
        with SimpleProducer(b.host, b.port, acks=rq.Acks.ALL) as producer, pytest.raises(UnknownTopic):
            producer.send(TOPIC, [b"late"], 0)
    with AdminClient(cluster[3].grpc_address, timeout=10) as admin:
        assert admin.delete_topic(TOPIC).error_code == pb.UNKNOWN_TOPIC_OR_PARTITION
        assert admin.delete_topic("__rill_groups").error_code == pb.INVALID_TOPIC
        created = admin.create_topic(TOPIC, 2, 3)
        assert created.error_code == pb.NONE, created.error_message
    leaders = wait_leaders(cluster, TOPIC, 2)
    for p, leader in leaders.items():
        with SimpleConsumer(leader.host, leader.port, timeout=5) as consumer:
            assert (consumer.earliest_offset(TOPIC, p), consumer.latest_offset(TOPIC, p)) == (0, 0)
            assert consumer.fetch(TOPIC, p, 0) == []
    assert produce_acked(cluster, TOPIC, 0, [b"new"]) == [(0, b"new")]
    # the group's commit of the deleted topic went with it (Kafka's way): the new topic starts with none
    wait_for(lambda: committed(cluster, "old-readers") == [], timeout=10, what="the deleted topic's offsets to go")


def test_a_deletion_waits_for_a_stopped_replica_and_survives_a_controller_failover(
        tmp_path: Path, zk_connect: str, zk: KazooClient) -> None:
    """With a replica's broker stopped the deletion stays marked (REQUEST_TIMED_OUT) while the live brokers delete
    theirs; the controller then stops, the next one carries on from the marker (which names the brokers done:
    it waits for the stopped one only), and the returning broker deletes its replica (found on disk at start)
    before the nodes go."""
    with capture_logs() as logs, contextlib.ExitStack() as stack:
        brokers = {i: stack.enter_context(cluster_broker(tmp_path, zk_connect, i, **SETTINGS)) for i in (1, 2, 3)}
        create_replicated(zk, brokers, TOPIC, 1)
        produce_acked(brokers, TOPIC, 0, [b"m%d" % i for i in range(10)])
        found = read_controller(zk)
        assert found is not None
        controller = brokers[found.broker_id]
        stopped, other = [b for i, b in sorted(brokers.items()) if i != found.broker_id]
        stopped.close()
        with AdminClient(other.grpc_address, timeout=10) as admin:
            pending = admin.delete_topic(TOPIC, timeout_ms=1000)
        assert pending.error_code == pb.REQUEST_TIMED_OUT, pending.error_message
        assert zk.exists(delete_marker_path(TOPIC)) is not None and zk.exists(topic_path(TOPIC)) is not None
        for b in (controller, other):
            wait_for(lambda b=b: forgotten(b, TOPIC), timeout=10, what=f"broker {b.broker_id} to delete its replica")
        assert replica_dirs(stopped, TOPIC) == [f"{TOPIC}-0"]
        controller.close()
        wait_for(lambda: (c := read_controller(zk)) is not None and c.broker_id == other.broker_id, timeout=10,
                 what="the other broker to become the controller")
        assert zk.exists(topic_path(TOPIC)) is not None  # still waiting for the stopped broker
        back = stack.enter_context(cluster_broker(tmp_path, zk_connect, stopped.broker_id, **SETTINGS))
        wait_for(lambda: zk.exists(topic_path(TOPIC)) is None, timeout=20, what="the deletion to complete")
        assert zk.exists(delete_marker_path(TOPIC)) is None
        wait_for(lambda: forgotten(back, TOPIC), timeout=10, what="the returning broker to delete its replica")
    started = [e for e in logs if e["event"] == "controller.topic_deletion_started"]
    assert [e["done_before"] for e in started] == [[], sorted({controller.broker_id, other.broker_id})]
    assert [e["topic"] for e in logs if e["event"] == "controller.topic_deleted"] == [TOPIC]


def test_added_partitions_get_leaders_and_the_groups_consumers(cluster: Brokers, zk: KazooClient) -> None:
    """CreatePartitions asked of a broker that is not the controller adds partitions 2 and 3 (placed by the
    creation's rule, states written, leaders serving); a consumer group subscribed to the topic rebalances onto
    them and reads what is produced there; shrinking, the same count, internal and unknown topics are refused."""
    create_replicated(zk, cluster, TOPIC, 2)
    found = read_controller(zk)
    assert found is not None
    asked = next(b for i, b in cluster.items() if i != found.broker_id)
    bootstrap = ",".join(b.address for b in cluster.values())
    consumer = Consumer(bootstrap_servers=bootstrap, group_id="readers", auto_offset_reset="earliest",
                        enable_auto_commit=False, metadata_max_age_ms=500)
    try:
        consumer.subscribe([TOPIC])
        owned = lambda: {tp.partition for tp in consumer.assignment()}  # noqa: E731
        poll_until(consumer, lambda: owned() == {0, 1}, "the first assignment")
        with AdminClient(asked.grpc_address, timeout=10) as admin:
            grown = admin.create_partitions(TOPIC, 4)
            assert grown.error_code == pb.NONE, grown.error_message
            assert [p.partition for p in grown.partitions] == [2, 3]
            assert all(sorted(p.replicas) == [1, 2, 3] for p in grown.partitions)
            replicas = read_topic(zk, TOPIC)
            assert replicas is not None and replicas.partitions == 4
            assert set(read_states(zk, TOPIC, range(4))) == {0, 1, 2, 3}
            wait_leaders(cluster, TOPIC, 4)
            refusals = [admin.create_partitions(TOPIC, 3), admin.create_partitions(TOPIC, 4),
                        admin.create_partitions("__rill_groups", 60), admin.create_partitions("nope", 2)]
        assert [r.error_code for r in refusals] == [pb.INVALID_PARTITIONS, pb.INVALID_PARTITIONS, pb.INVALID_TOPIC,
                                                     pb.UNKNOWN_TOPIC_OR_PARTITION]
        assert "cannot shrink" in refusals[0].error_message
        poll_until(consumer, lambda: owned() == {0, 1, 2, 3}, "the group to rebalance onto the new partitions")
        for p in (2, 3):
            produce_acked(cluster, TOPIC, p, [b"new-%d" % p])
        got: set[tuple[int, bytes]] = set()
        poll_until(consumer, lambda: {(2, b"new-2"), (3, b"new-3")} <= got, "the new partitions' messages",
                   into=got)
    finally:
        consumer.close()
    assert leader_of(cluster, TOPIC, 3) is not None


def poll_until(consumer: Consumer, done: object, what: str, timeout: float = 20.0,
               into: set[tuple[int, bytes]] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not done():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} (assignment {sorted(consumer.assignment())})")
        for message in consumer.poll(0.2):
            if into is not None:
                into.add((message.partition, message.value))


def test_a_kafka07_topic_is_deleted_broker_by_broker(cluster: Brokers, zk: KazooClient) -> None:
    """Each broker deletes its own partitions of a 0.7-style topic and its registration node; the partition map
    stays (numbers kept) until the last broker holding the topic deletes it."""
    for b in (cluster[1], cluster[2]):
        with SimpleConsumer(b.host, b.port, timeout=5) as client:
            client.create_topic("events", 2)
    wait_for(lambda: zk.exists("/brokers/topics/events") is not None
             and sorted(zk.get_children("/brokers/topics/events")) == ["1", "2"], what="both registered")
    with AdminClient(cluster[1].grpc_address, timeout=10) as admin:
        deleted = admin.delete_topic("events")
    assert (deleted.error_code, deleted.replicated, deleted.partitions) == (pb.NONE, False, 2)
    wait_for(lambda: zk.get_children("/brokers/topics/events") == ["2"], what="broker 1's node removed")
    assert zk.exists("/rill/topics/events") is not None and "events" not in cluster[1].broker.logs.topics()
    with AdminClient(cluster[3].grpc_address, timeout=10) as admin:
        assert admin.delete_topic("events").error_code == pb.UNKNOWN_TOPIC_OR_PARTITION  # holds none
    with AdminClient(cluster[2].grpc_address, timeout=10) as admin:
        assert admin.delete_topic("events").error_code == pb.NONE
    wait_for(lambda: zk.exists("/rill/topics/events") is None and zk.exists("/brokers/topics/events") is None,
             what="the partition map removed with the last partitions")


def _coordinator_stub(cluster: Brokers, group: str) -> Any:
    with grpc.insecure_channel(cluster[1].grpc_address) as channel:
        info = pb_grpc.GroupCoordinatorStub(channel).ListGroups(  # type: ignore[no-untyped-call]
            pb.ListGroupsRequest(consumer_groups=[group]), timeout=10).groups_info[0]
    channel = grpc.insecure_channel(f"{info.controller_broker.host}:{info.controller_broker.grpc_port}")
    return pb_grpc.GroupCoordinatorStub(channel)  # type: ignore[no-untyped-call]


def admin_commit(cluster: Brokers, group: str, offsets: list[tuple[str, int, int]]) -> None:
    stub = _coordinator_stub(cluster, group)
    assert stub.CreateGroup(pb.CreateGroupRequest(consumer_group=group, topics=[t for t, _, _ in offsets]),
                            timeout=10).error_code == pb.NONE
    answer = stub.CommitOffsets(pb.CommitOffsetsRequest(consumer_group=group, offsets=[
        pb.PartitionOffset(topic=t, partition=p, offset=o) for t, p, o in offsets]), timeout=10)
    assert answer.error_code == pb.NONE


def committed(cluster: Brokers, group: str) -> list[tuple[str, int, int]]:
    answer = _coordinator_stub(cluster, group).FetchOffsets(pb.FetchOffsetsRequest(consumer_group=group), timeout=10)
    assert answer.error_code == pb.NONE
    return [(o.topic, o.partition, o.offset) for o in answer.offsets]
