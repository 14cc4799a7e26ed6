"""A broker with zookeeper.connect registers itself exactly as seed 004 shows, and keeps it right."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import grpc
import pytest
from kazoo.client import KazooClient, KazooState

from rill.broker.log.manager import LogManager
from rill.broker.testing import RunningBroker, running_broker
from rill.broker.cluster.registration import ZkRegistrationError
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import encode_message_set
from rill.v1 import admin_pb2 as apb
from rill.v1 import admin_pb2_grpc as apb_grpc
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import coordinator_pb2_grpc as pb_grpc
from tests.conftest import RawClient


def wait_for(check: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def zk_broker(tmp_path: Path, zk_connect: str, broker_id: int = 2,
              **overrides: object) -> AbstractContextManager[RunningBroker]:
    return running_broker(tmp_path / f"data-{broker_id}", zookeeper_connect=zk_connect, broker_id=broker_id,
                          advertised_host_name="127.0.0.1", **overrides)


def ephemerals(zk: KazooClient, path: str = "/brokers") -> dict[str, int]:
    """Every ephemeral node under ``path`` and its owner session."""
    out: dict[str, int] = {}
    for child in zk.get_children(path):
        sub = f"{path}/{child}"
        _, stat = zk.get(sub)
        if stat.ephemeralOwner:
            out[sub] = stat.ephemeralOwner
        out.update(ephemerals(zk, sub))
    return out


def test_registration_matches_seed_004(tmp_path: Path, zk_connect: str, zk: KazooClient) -> None:
    """Broker 2 holding dogs (4 partitions) and mutts (5) registers seed 004's nodes and values."""
    logs = LogManager(str(tmp_path / "data-2"))
    logs.create_topic("dogs", 4)
    logs.create_topic("mutts", 5)
    logs.close()
    with zk_broker(tmp_path, zk_connect) as b:
        value, stat = zk.get("/brokers/ids/2")
        creator, host, port = value.decode().split(":")
        assert (host, int(port)) == ("127.0.0.1", b.port)
        creator_host, _, stamp = creator.rpartition("-")
        assert creator_host == "127.0.0.1" and abs(int(stamp) - time.time() * 1000) < 60_000
        assert stat.ephemeralOwner != 0
        assert zk.get("/brokers/topics/dogs/2")[0] == b"4"
        assert zk.get("/brokers/topics/mutts/2")[0] == b"5"
        assert set(ephemerals(zk)) == {"/brokers/ids/2", "/brokers/topics/dogs/2", "/brokers/topics/mutts/2"}
        # intermediate nodes are persistent and hold the creator id
        for path in ("/brokers", "/brokers/ids", "/brokers/topics", "/brokers/topics/dogs"):
            data, stat = zk.get(path)
            assert data == creator.encode() and stat.ephemeralOwner == 0, path


def test_new_topic_is_registered_when_produced_to(tmp_path: Path, zk_connect: str, zk: KazooClient) -> None:
    """Producing to a new topic publishes /brokers/topics/[topic]/[id] with its partition count."""
    with zk_broker(tmp_path, zk_connect, num_partitions=4) as b:
        assert zk.exists("/brokers/topics/t/2") is None
        raw = RawClient(b.host, b.port)
        try:
            body = raw.request(rq.encode_produce_ack([rq.ProduceRequest("t", 0, encode_message_set([b"x"]))], 1))
            assert rq.decode_produce_ack_response(body)[0] == 0
        finally:
            raw.close()
        wait_for(lambda: zk.exists("/brokers/topics/t/2") is not None, what="/brokers/topics/t/2")
        assert zk.get("/brokers/topics/t/2")[0] == b"4"


def test_duplicate_broker_id_fails_to_start(tmp_path: Path, zk_connect: str, zk: KazooClient) -> None:
    """A second broker with a live broker's id fails at start-up with a clear error and leaves the first alone."""
    with zk_broker(tmp_path, zk_connect, broker_id=1) as first:
        before = zk.get("/brokers/ids/1")[0]
        with pytest.raises(ZkRegistrationError, match="broker id 1 is already registered"):
            with running_broker(tmp_path / "other", zookeeper_connect=zk_connect, broker_id=1,
                                zookeeper_session_timeout_ms=1500):
                pass
        assert zk.get("/brokers/ids/1")[0] == before
        assert before.decode().endswith(f":{first.port}")


def expire_session(client: KazooClient, hosts: str) -> None:
    """Expire ``client``'s session the kazoo-harness way: another client joins it and closes it."""
    lost = threading.Event()

    def watch(state: str) -> bool:
        if state == KazooState.LOST:
            lost.set()
            return True
        return False

    client.add_listener(watch)
    session_id, password = client.client_id
    while not lost.is_set():
        other = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=1.0)
        other.start(timeout=10)
        other.stop()
        other.close()
        lost.wait(5)


def test_session_expiry_reregisters_without_stale_nodes(tmp_path: Path, zk_connect: str, zk: KazooClient) -> None:
    """After its session expires the broker registers everything again under the new session, and nothing of the old one remains."""
    logs = LogManager(str(tmp_path / "data-2"))
    logs.create_topic("dogs", 4)
    logs.close()
    with zk_broker(tmp_path, zk_connect) as b:
        reg = b.broker.zookeeper
        assert reg is not None
        old_session = reg.zk.client_id[0]
        old_value = zk.get("/brokers/ids/2")[0]
        expire_session(reg.zk, zk_connect)

        def reregistered() -> bool:
            nodes = ephemerals(zk)
            return (set(nodes) == {"/brokers/ids/2", "/brokers/topics/dogs/2"}
                    and set(nodes.values()) == {reg.zk.client_id[0]} and reg.zk.client_id[0] != old_session)
        wait_for(reregistered, timeout=15, what="re-registration under the new session")
        value = zk.get("/brokers/ids/2")[0]
        assert value != old_value and value.decode().endswith(f":127.0.0.1:{b.port}")
        assert zk.get("/brokers/topics/dogs/2")[0] == b"4"
        # a topic created after the expiry is registered under the new session too
        b.broker.logs.create_topic("cats", 3)
        wait_for(lambda: zk.exists("/brokers/topics/cats/2") is not None, what="/brokers/topics/cats/2")
        assert zk.get("/brokers/topics/cats/2")[1].ephemeralOwner == reg.zk.client_id[0]


def test_clean_shutdown_removes_the_ephemerals(tmp_path: Path, zk_connect: str, zk: KazooClient) -> None:
    """Closing the broker ends its session, so its id and topic nodes disappear at once."""
    with zk_broker(tmp_path, zk_connect, num_partitions=2) as b:
        b.broker.logs.create_topic("t", 2)
        wait_for(lambda: zk.exists("/brokers/topics/t/2") is not None, what="/brokers/topics/t/2")
    assert ephemerals(zk) == {}
    assert zk.exists("/brokers/ids") is not None  # the persistent skeleton stays


def test_started_broker_coordinates_its_groups_at_once(tmp_path: Path, zk_connect: str) -> None:
    """A clustered broker counts as started only once it serves the groups of the groups topic partitions it
    leads (no NOT_COORDINATOR naming itself)."""
    with zk_broker(tmp_path, zk_connect) as b:
        placement = b.broker.coordination.placement
        assert placement is not None and placement.loaded_partitions() == list(range(5))
        with grpc.insecure_channel(b.grpc_address) as channel:
            stub = pb_grpc.GroupCoordinatorStub(channel)
            for name in ("g1", "g2", "g3"):
                assert stub.CreateGroup(pb.CreateGroupRequest(client_id="t", consumer_group=name,
                                                              session_timeout=10_000, topics=["t"]),
                                        timeout=10).error_code == 0


def test_topic_created_through_admin_grpc_is_registered_and_rebalances(tmp_path: Path, zk_connect: str,
                                                                       zk: KazooClient) -> None:
    """A topic created by the Admin CreateTopic reaches ZooKeeper and rebalances the groups subscribed to it."""
    with zk_broker(tmp_path, zk_connect) as b, grpc.insecure_channel(b.grpc_address) as channel:
        stub, admin = pb_grpc.GroupCoordinatorStub(channel), apb_grpc.AdminStub(channel)
        assert stub.CreateGroup(pb.CreateGroupRequest(client_id="t", consumer_group="g", session_timeout=10_000,
                                                      topics=["via-admin"]), timeout=10).error_code == 0
        member = stub.RegisterConsumer(pb.RegisterConsumerRequest(client_id="c", consumer_group="g"), timeout=10)
        assert list(member.partitions_to_own) == []
        created = admin.CreateTopic(apb.CreateTopicRequest(topic="via-admin", partitions=3), timeout=10)
        assert created.error_code == 0 and created.topic.partition_count == 3
        wait_for(lambda: zk.exists("/brokers/topics/via-admin/2") is not None, what="/brokers/topics/via-admin/2")
        assert zk.get("/brokers/topics/via-admin/2")[0] == b"3"

        def heartbeat() -> int:
            return int(stub.Heartbeat(pb.HeartbeatRequest(consumer_group="g", consumer_id=member.consumer_id,
                                                          generation=member.generation), timeout=10).error_code)
        wait_for(lambda: heartbeat() == pb.REBALANCE_IN_PROGRESS, what="the rebalance")
        again = stub.RegisterConsumer(pb.RegisterConsumerRequest(client_id="c", consumer_group="g",
                                                                 consumer_id=member.consumer_id), timeout=10)
        assert {(p.topic, p.partition) for p in again.partitions_to_own} == {("via-admin", p) for p in range(3)}


def test_standalone_without_zookeeper_connect(tmp_path: Path) -> None:
    """Without zookeeper.connect the broker has no ZooKeeper registration at all."""
    with running_broker(tmp_path / "data") as b:
        assert b.broker.zookeeper is None
