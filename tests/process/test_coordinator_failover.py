"""Three real ``rill-broker`` processes on one ZooKeeper: the coordinator is killed with -9 and its group resumes."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import grpc
import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from rill.client.protocol import requests as rq
from rill.client.protocol.messages import encode_message_set
from rill.coordinator import group_checkpoint
from rill.coordinator.placement import coordinator_for
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import coordinator_pb2_grpc as pb_grpc
from tests.conftest import RawClient
from tests.process.broker_process import BrokerProcess

T = TypeVar("T")
INTERVAL_MS = 200
SESSION_MS = 2000


def eventually(get: Callable[[], T], ok: Callable[[T], bool], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = get()
            if ok(value):
                return value
        except (grpc.RpcError, NoNodeError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def produce(proc: BrokerProcess, payloads: list[bytes]) -> int:
    raw = RawClient("127.0.0.1", proc.port)
    try:
        body = raw.request(rq.encode_produce_ack([rq.ProduceRequest("t", 0, encode_message_set(payloads))], 1))
        error, acks = rq.decode_produce_ack_response(body)
        assert error == 0 and acks[0].error == 0, acks
        return acks[0].next_offset
    finally:
        raw.close()


@pytest.fixture
def brokers(tmp_path: Path, zk_connect: str) -> Iterator[dict[int, BrokerProcess]]:
    procs: dict[int, BrokerProcess] = {}
    try:
        for i in (1, 2, 3):
            procs[i] = BrokerProcess(
                tmp_path / f"data-{i}", "--zookeeper", zk_connect, "--broker-id", str(i),
                "--set", "advertised.host.name=127.0.0.1", "--set", "num.partitions=1",
                "--set", f"offsets.checkpoint.interval.ms={INTERVAL_MS}",
                "--set", f"zookeeper.session.timeout.ms={SESSION_MS}").start()
        yield procs
    finally:
        for proc in procs.values():
            if proc.proc is not None and proc.proc.poll() is None:
                proc.terminate()


@pytest.mark.slow
def test_group_resumes_on_another_broker_after_kill_9(brokers: dict[int, BrokerProcess], zk_connect: str) -> None:
    """Commits checkpointed before the coordinator's kill -9 are where the group resumes, on the next broker."""
    g = next(f"app-{n}" for n in range(1000) if coordinator_for(f"app-{n}", [1, 2, 3]) == 3)
    successor = coordinator_for(g, [1, 2])
    assert successor is not None
    # the same messages on every broker, so the committed offset is a message boundary at any coordinator
    ends = {produce(proc, [b"m%03d" % n for n in range(50)]) for proc in brokers.values()}
    assert len(ends) == 1
    committed = ends.pop()
    channels = {i: grpc.insecure_channel(f"127.0.0.1:{p.grpc_port}") for i, p in brokers.items()}
    stubs = {i: pb_grpc.GroupCoordinatorStub(c) for i, c in channels.items()}  # type: ignore[no-untyped-call]
    zk = KazooClient(hosts=zk_connect, timeout=10)
    zk.start(timeout=10)
    try:
        created = eventually(lambda: stubs[1].CreateGroup(pb.CreateGroupRequest(
            consumer_group=g, topics=["t"], session_timeout=6000), timeout=5), lambda r: r.error_code == pb.NONE,
            30, "CreateGroup through broker 1 to be forwarded to the coordinator")
        assert created.coordinator.broker_id == 3 and created.coordinator.grpc_port == brokers[3].grpc_port
        for i in (1, 2, 3):
            listing = stubs[i].ListGroups(pb.ListGroupsRequest(consumer_groups=[g]), timeout=5)
            assert listing.groups_info[0].controller_broker.broker_id == 3, i
        member = stubs[3].RegisterConsumer(pb.RegisterConsumerRequest(
            client_id="c", consumer_group=g, topics=["t"]), timeout=30)
        assert member.error_code == pb.NONE
        commit = stubs[3].CommitOffsets(pb.CommitOffsetsRequest(
            consumer_group=g, consumer_id=member.consumer_id, generation=member.generation,
            offsets=[pb.PartitionOffset(topic="t", partition=0, offset=committed)]), timeout=5)
        assert commit.error_code == pb.NONE
        eventually(lambda: group_checkpoint.decode(zk.get(f"/rill/groups/{g}")[0]),
                   lambda cp: cp.snapshot is not None and ("t", 0, committed) in cp.snapshot.offsets,
                   5, "the commit's checkpoint")
        time.sleep(2 * INTERVAL_MS / 1000)  # more than one checkpoint interval before the kill

        brokers[3].kill9()
        killed_at = time.monotonic()
        info = eventually(lambda: stubs[1].ListGroups(pb.ListGroupsRequest(consumer_groups=[g]), timeout=5)
                          .groups_info[0], lambda i: i.error_code == pb.NONE and i.controller_broker.broker_id ==
                          successor, 30, "ListGroups to name the successor")
        assert info.controller_broker.grpc_port == brokers[successor].grpc_port
        fetched = stubs[successor].FetchOffsets(pb.FetchOffsetsRequest(consumer_group=g), timeout=5)
        assert fetched.error_code == pb.NONE
        assert ("t", 0, committed) in [(o.topic, o.partition, o.offset) for o in fetched.offsets]
        # the old member is unknown to the new coordinator; registering again resumes from the commit
        old = stubs[successor].Heartbeat(pb.HeartbeatRequest(
            consumer_group=g, consumer_id=member.consumer_id, generation=member.generation), timeout=5)
        assert old.error_code == pb.UNKNOWN_MEMBER
        again = stubs[successor].RegisterConsumer(pb.RegisterConsumerRequest(
            client_id="c", consumer_group=g, topics=["t"]), timeout=30)
        assert again.error_code == pb.NONE and again.generation > member.generation
        offsets = {(p.topic, p.partition): p.offset for p in again.partitions_to_own}
        assert offsets[("t", 0)] == committed
        assert time.monotonic() - killed_at < 20
        other = next(i for i in (1, 2) if i != successor)
        assert stubs[other].FetchOffsets(pb.FetchOffsetsRequest(consumer_group=g), timeout=5).error_code == \
            pb.NOT_COORDINATOR
    finally:
        zk.stop()
        zk.close()
        for channel in channels.values():
            channel.close()
