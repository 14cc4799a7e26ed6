"""The ZooKeeper-mode clients over SASL_SSL, against brokers with the authorizer on.

Two brokers on a real ZooKeeper, each with a PLAINTEXT and a SASL_SSL listener
(``/brokers/ids`` names the PLAINTEXT one; ``/rill/brokers`` lists both). The SCRAM user
``alice`` may read, describe and write the topic ``secured``; anonymous clients may do
nothing. A ZooKeeper consumer and a ZooKeeper-aware producer given ``security.protocol
= SASL_SSL`` and alice's credentials find each broker's SASL_SSL listener in ZooKeeper
and work there as ``User:alice``. With a wrong password the consumer's ``poll()``
raises AuthenticationFailed within seconds, and the producer's sends fail after
``request.timeout.ms`` with the refusal in their error (as a bootstrap producer's do).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from rill.broker.testing import RunningBroker
from rill.client.errors import AuthenticationFailed, RillError
from rill.client.producer import Producer
from rill.client.producer.errors import ProducerTimeout
from rill.client.security.acl_store_zk import ZkAclStore
from rill.client.security.acls import (AccessControlEntry, AclBinding, Operation, PatternType, Permission,
                                       ResourcePattern, ResourceType)
from rill.client.security.client_security import from_settings
from rill.client.security.entity_configs_zk import ZkEntityConfigs
from rill.client.security.scram_credentials import CredentialStore
from rill.client.simple import SimpleConsumer, SimpleProducer
from rill.client.zookeeper import PartitionKey, ZkConsumer, ZkRecord
from rill.client.zookeeper.fetcher_threads import BrokerFetcher, FetchConfig
from rill.client.zookeeper.producer_metadata import ZkTopicLayout
from rill.client.zookeeper.rebalance_thread import _placement
from rill.client.zookeeper.registry import BrokerRegistration, ClusterSnapshot
from rill.client.zookeeper.streams import StreamBuffers
from tests.security.tls_fixtures import make_certs
from tests.zookeeper.test_broker_registration import wait_for, zk_broker
from tests.zookeeper.zk_consumer_support import FAST

TOPIC = "secured"
LISTENERS = "PLAINTEXT://127.0.0.1:0,SASL_SSL://localhost:0"


@dataclass(frozen=True)
class SecuredCluster:
    brokers: list[RunningBroker]
    ca: str

    def client(self, password: str = "alice-secret") -> dict[str, Any]:
        """alice's security settings (kafka-python's names), with ``password``."""
        return {"security.protocol": "SASL_SSL", "ssl.cafile": self.ca, "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.plain.username": "alice", "sasl.plain.password": password}

    def principals(self, listener: str) -> set[str]:
        """The principals of the open connections on every broker's ``listener``."""
        return {c.principal for b in self.brokers for c in list(b.server.connections.values())
                if c.listener == listener}


def _alice_may(zk: KazooClient, *operations: Operation) -> None:
    store = ZkAclStore(zk, watch=False)
    try:
        store.add([AclBinding(ResourcePattern(ResourceType.TOPIC, TOPIC, PatternType.LITERAL),
                              AccessControlEntry("User:alice", "*", op, Permission.ALLOW)) for op in operations])
    finally:
        store.close()


@pytest.fixture
def cluster(tmp_path: Path, zk: KazooClient, zk_connect: str) -> Iterator[SecuredCluster]:
    """Brokers 1 and 2 with the authorizer on, each holding ``secured`` (2 partitions), users and ACLs in ZooKeeper."""
    certs = make_certs(tmp_path / "certs")
    with ZkEntityConfigs(zk) as configs:
        CredentialStore(configs).set_password("alice", "alice-secret")
    _alice_may(zk, Operation.READ, Operation.DESCRIBE, Operation.WRITE)
    settings = {**certs.broker_settings(), "listeners": LISTENERS, "authorizer.enable": True,
                "zookeeper.session.timeout.ms": 4000}
    with ExitStack() as stack:
        brokers = [stack.enter_context(zk_broker(tmp_path, zk_connect, broker_id=i, **settings)) for i in (1, 2)]
        for b in brokers:
            b.broker.logs.create_topic(TOPIC, 2)
        for i in (1, 2):
            wait_for(lambda: zk.exists(f"/brokers/topics/{TOPIC}/{i}") is not None, what=f"{TOPIC} on broker {i}")
        yield SecuredCluster(brokers, certs.ca)


def registration(broker_id: int, listeners: dict[str, tuple[str, int]]) -> BrokerRegistration:
    """A broker registered at 127.0.0.1:90<id> (its PLAINTEXT address) with ``listeners`` in /rill/brokers."""
    endpoints = tuple((name, host, port, 0) for name, (host, port) in sorted(listeners.items()))
    return BrokerRegistration(broker_id, f"c-{broker_id}", "127.0.0.1", 9000 + broker_id, 0, endpoints)


SNAPSHOT = ClusterSnapshot({1: registration(1, {"PLAINTEXT": ("127.0.0.1", 9001), "SASL_SSL": ("b1.example", 9401)}),
                            2: registration(2, {})},  # a broker that lists no listeners (a 0.7 broker)
                           {TOPIC: {1: 1, 2: 1}})


def test_the_producer_layout_gives_each_broker_at_the_clients_listener() -> None:
    """The ZooKeeper-aware producer's metadata names each broker's SASL_SSL address; a broker without listeners
    keeps its registered one."""
    brokers = ZkTopicLayout().metadata(SNAPSHOT, [TOPIC], "SASL_SSL").brokers
    assert [(b.broker_id, b.host, b.port) for b in brokers] == [(1, "b1.example", 9401), (2, "127.0.0.1", 9002)]
    plain = ZkTopicLayout().metadata(SNAPSHOT, [TOPIC]).brokers
    assert [(b.host, b.port) for b in plain] == [("127.0.0.1", 9001), ("127.0.0.1", 9002)]


def test_fetchers_and_placement_use_the_clients_listener() -> None:
    """The consumer's fetcher for a broker connects to its listener of security.protocol, and the placement that
    decides whether fetchers restart compares those addresses."""
    security = from_settings({"security.protocol": "SASL_PLAINTEXT", "sasl.plain.username": "alice"})
    snapshot = ClusterSnapshot({1: registration(1, {"SASL_PLAINTEXT": ("b1.example", 9301)})})
    config = FetchConfig(1024, 10, True, 1.0, security)
    fetcher = BrokerFetcher(snapshot.brokers[1], [], 0, StreamBuffers(1, 1), config)
    assert (config.listener, fetcher.host, fetcher.port) == ("SASL_PLAINTEXT", "b1.example", 9301)
    key = PartitionKey(TOPIC, 1, 0)
    assert _placement(snapshot, {key: "t-0"}, config.listener) == {key: ("b1.example", 9301)}
    assert _placement(snapshot, {key: "t-0"}, "PLAINTEXT") == {key: ("127.0.0.1", 9001)}


def test_a_repeated_fetch_error_is_queued_once() -> None:
    """A fetcher retrying with a bad password reports the same refusal each time: it is raised once per take,
    not piled up while nobody polls."""
    buffers = StreamBuffers(1, 1)
    for _ in range(5):
        buffers.fail(AuthenticationFailed("SASL PLAIN authentication with broker b:1 failed"))
    with pytest.raises(AuthenticationFailed):
        buffers.take(None, 0, 10)
    assert buffers.take(None, 0, 10) == []


def _produce_as_alice(cluster: SecuredCluster, per_partition: int) -> set[bytes]:
    sent: set[bytes] = set()
    security = from_settings(cluster.client())
    for b in cluster.brokers:
        with SimpleProducer("localhost", b.listener_port("SASL_SSL"), timeout=10, security=security) as producer:
            for p in range(2):
                values = [f"{b.broker.config['broker.id']}-{p}-{i}".encode() for i in range(per_partition)]
                producer.send(TOPIC, values, p)
                sent.update(values)
    return sent


def _on_broker(cluster: SecuredCluster) -> list[bytes]:
    """Every value of ``secured`` on every broker, read as alice over SASL_SSL."""
    found: list[bytes] = []
    security = from_settings(cluster.client())
    for b in cluster.brokers:
        with SimpleConsumer("localhost", b.listener_port("SASL_SSL"), timeout=10, security=security) as c:
            for p in range(2):
                found.extend(m.value for m in c.fetch(TOPIC, p, 0))
    return found


@pytest.mark.slow
def test_zookeeper_consumer_reads_over_sasl_ssl(cluster: SecuredCluster, zk_connect: str) -> None:
    """A ZkConsumer with alice's settings fetches every message from the brokers' SASL_SSL listeners as User:alice."""
    sent = _produce_as_alice(cluster, 20)
    with SimpleConsumer("127.0.0.1", cluster.brokers[0].port, timeout=5) as anonymous:
        with pytest.raises(RillError, match="TopicAuthorizationFailed"):
            anonymous.fetch(TOPIC, 0, 0)  # the authorizer is on: the PLAINTEXT address would not do
    with ZkConsumer(cluster.client(), zookeeper=zk_connect, group="secure-readers", **FAST) as consumer:
        consumer.subscribe([TOPIC])
        got: list[ZkRecord] = []
        wait_for(lambda: got.extend(consumer.poll(0.1)) or len(got) >= len(sent), timeout=20, what="every record")
        assert {r.value for r in got} == sent and len(got) == len(sent)
        assert cluster.principals("SASL_SSL") >= {"User:alice"}
        assert "User:alice" not in cluster.principals("PLAINTEXT")


@pytest.mark.slow
def test_zookeeper_consumer_with_a_wrong_password_raises(cluster: SecuredCluster, zk_connect: str) -> None:
    """poll() raises AuthenticationFailed (naming SASL) within seconds, rather than returning nothing forever."""
    _produce_as_alice(cluster, 3)
    with ZkConsumer(cluster.client("guess"), zookeeper=zk_connect, group="wrong", **FAST) as consumer:
        consumer.subscribe([TOPIC])
        started = time.monotonic()
        with pytest.raises(AuthenticationFailed, match="SASL SCRAM-SHA-256 authentication .* failed"):
            while time.monotonic() - started < 15:
                consumer.poll(0.2)
        assert time.monotonic() - started < 15


@pytest.mark.slow
def test_zookeeper_producer_sends_over_sasl_ssl(cluster: SecuredCluster, zk_connect: str) -> None:
    """A Producer with zookeeper.connect and alice's settings sends to the SASL_SSL listeners it finds in ZooKeeper."""
    values = [f"z{i}".encode() for i in range(60)]
    with Producer({**cluster.client(), "zookeeper.connect": zk_connect, "linger.ms": 1}) as producer:
        responses = [producer.send(TOPIC, v) for v in values]
        for r in responses:
            assert r.get_error(timeout=15) is None
        assert {r.partition for r in responses} == {0, 1, 2, 3}  # both brokers' partitions
        assert cluster.principals("SASL_SSL") >= {"User:alice"}
    assert sorted(_on_broker(cluster)) == sorted(values)


@pytest.mark.slow
def test_zookeeper_producer_with_a_wrong_password_fails_its_sends(cluster: SecuredCluster, zk_connect: str) -> None:
    """Sends fail after request.timeout.ms, as a bootstrap producer's do, with the refusal in the error; nothing
    is appended."""
    with Producer({**cluster.client("guess"), "zookeeper.connect": zk_connect, "linger.ms": 1,
                   "request.timeout.ms": 3000}) as producer:
        started = time.monotonic()
        error = producer.send(TOPIC, b"never").get_error(timeout=15)
        assert isinstance(error, ProducerTimeout), repr(error)
        assert "SASL SCRAM-SHA-256 authentication with broker" in str(error) and "failed" in str(error)
        assert time.monotonic() - started < 10
    assert _on_broker(cluster) == []
