"""Brokers call each other's gRPC over TLS, and a cluster can then run without a plaintext gRPC port.

The cluster test runs three in-process brokers on a real ZooKeeper, each with one SSL
listener and a TLS gRPC port (client certificates required on both),
``security.inter.broker.protocol = SSL`` and ``grpc.port = -1``: a broker-to-broker gRPC
call made in plaintext would find no port to reach. The controller's LeaderAndIsr
reaches every broker; an acks=all produce through the SSL listener is read back; a
CreateGroup and a ListGroups sent to a broker that does not coordinate the group are
forwarded to the one that does; CreatePartitions asked of a broker that is not the
controller is redirected to the controller's TLS gRPC port; and the leader's stop first
moves its leaderships away (its ControlledShutdown to the controller). The other tests check the choice itself:
without inter-broker TLS peers are called as before, and a cluster refuses
``grpc.port = -1`` unless its brokers call each other over TLS.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from types import SimpleNamespace
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from structlog.testing import capture_logs

from rill.broker.cluster.controller_refusal import controller_broker
from rill.broker.cluster.replica_control_servicer import ReplicaControlClient
from rill.broker.cluster.replicated_topics import create_topic
from rill.broker.config import BrokerConfig
from rill.broker.security.broker_security import BrokerSecurity
from rill.broker.security.inter_broker_grpc import PLAINTEXT_GRPC, inter_broker_grpc
from rill.broker.testing import RunningBroker
from rill.client.client_config import ConfigError
from rill.client.errors import RillError
from rill.client.grpc_client import AdminClient
from rill.client.protocol import requests as rq
from rill.client.security.client_security import ClientSecurity, from_settings
from rill.client.simple import SimpleConsumer, SimpleProducer
from rill.client.zookeeper.registry import BrokerRegistration
from rill.coordinator import grpc_auth
from rill.coordinator.routing import Peers
from rill.v1 import coordinator_pb2 as pb
from tests.security.tls_fixtures import Certs, make_certs
from tests.zookeeper.replicated_support import Brokers, cluster_broker, leader_of
from tests.zookeeper.test_broker_registration import wait_for

TOPIC = "encrypted"
PEER = BrokerRegistration(2, "creator", "10.0.0.2", 9092, 9093, endpoints=(
    ("PLAINTEXT", "10.0.0.2", 9092, 9093), ("SASL_SSL", "broker2.example.com", 9096, 9095),
    ("SSL", "broker2.example.com", 9094, 9095)))
"""A peer's registration: registered at its plaintext address, its TLS listeners advertised elsewhere."""


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def config(certs: Certs, **overrides: Any) -> BrokerConfig:
    """A cluster broker's configuration (ZooKeeper is not reached: only the settings are read)."""
    settings: dict[str, Any] = {**certs.broker_settings(), "zookeeper.connect": "127.0.0.1:1/never",
                                "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"}
    settings.update({k.replace("_", "."): v for k, v in overrides.items()})
    return BrokerConfig.load(None, settings)


# ---------------------------------------------------------------- the choice


@pytest.mark.parametrize("overrides", [
    {},  # inter-broker PLAINTEXT, no TLS gRPC port
    {"grpc_ssl_port": 0},  # a TLS gRPC port for clients, inter-broker still PLAINTEXT
    {"security_inter_broker_protocol": "SSL"},  # replica fetches over TLS, but no TLS gRPC port
    {"security_inter_broker_protocol": "SSL", "grpc_ssl_port": 0, "zookeeper_connect": ""},  # a single broker
], ids=["plaintext", "tls-grpc-for-clients", "ssl-without-tls-grpc", "single-broker"])
def test_without_inter_broker_tls_peers_are_called_as_before(certs: Certs, overrides: dict[str, Any]) -> None:
    """Peers are called in plaintext on their registered host:grpc_port, as before the TLS option."""
    via = inter_broker_grpc(config(certs, **overrides))
    assert via is PLAINTEXT_GRPC and via.credentials is None and not via.tls
    assert ReplicaControlClient(None, via).address(PEER) == "10.0.0.2:9093"
    assert ReplicaControlClient().address(PEER) == "10.0.0.2:9093"
    assert Peers().address(pb.Broker(broker_id=2, host="10.0.0.2", grpc_port=9093)) == "10.0.0.2:9093"


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL"])
def test_with_inter_broker_tls_peers_are_called_on_their_tls_grpc_port(certs: Certs, protocol: str) -> None:
    """With an SSL or SASL_SSL inter-broker protocol and a TLS gRPC port, a peer is called over TLS on the gRPC
    port and host it advertised for that listener; a Peers without a resolver falls back to host:grpc_port."""
    via = inter_broker_grpc(config(certs, listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
                                   security_inter_broker_protocol=protocol, inter_broker_sasl_username="broker",
                                   grpc_ssl_port=0))
    assert via.tls and via.listener == protocol and via.describe() == f"TLS ({protocol} listener's gRPC port)"
    assert ReplicaControlClient(None, via).address(PEER) == "broker2.example.com:9095"
    assert PEER.grpc_address() == "10.0.0.2:9093"
    peers = Peers(None, via.credentials, lambda b: "broker2.example.com:9095" if b.broker_id == 2 else None)
    assert peers.address(pb.Broker(broker_id=2, host="10.0.0.2", grpc_port=9093)) == "broker2.example.com:9095"
    assert peers.address(pb.Broker(broker_id=3, host="10.0.0.3", grpc_port=9093)) == "10.0.0.3:9093"


def test_no_plaintext_grpc_port_in_a_cluster_needs_inter_broker_tls(certs: Certs) -> None:
    """grpc.port = -1 in a cluster is refused, naming the way out, unless brokers call each other over TLS."""
    refused = BrokerSecurity(config(certs, grpc_port=-1, grpc_ssl_port=0))
    accepted = BrokerSecurity(config(certs, grpc_port=-1, grpc_ssl_port=0, listeners="SSL://127.0.0.1:0",
                                     security_inter_broker_protocol="SSL"))
    try:
        with pytest.raises(ConfigError, match="set security.inter.broker.protocol to SSL or SASL_SSL"):
            refused.grpc_security("127.0.0.1")
        assert accepted.grpc_security("127.0.0.1").tls_address == "127.0.0.1:0"
    finally:
        refused.close()
        accepted.close()


def test_not_controller_names_the_controllers_tls_grpc_port_to_a_call_over_tls() -> None:
    """An Admin call the controller makes, asked of another broker: the NOT_CONTROLLER answer names the
    controller's plaintext gRPC port to a plaintext call, its TLS listener and TLS gRPC port to a call that
    came in over TLS (which the AdminClient follows with its TLS settings)."""
    registry: Any = SimpleNamespace(snapshot=SimpleNamespace(brokers={2: PEER}))
    plaintext = controller_broker(registry, 2)
    assert (plaintext.host, plaintext.port, plaintext.grpc_port) == ("10.0.0.2", 9092, 9093)

    def over_tls() -> pb.Broker:
        grpc_auth._tls.set(True)  # what the interceptors set for a call on the TLS port
        return controller_broker(registry, 2)

    tls = contextvars.copy_context().run(over_tls)
    assert (tls.host, tls.port, tls.grpc_port) == ("broker2.example.com", 9096, 9095)
    # a TLS gRPC port and no TLS data listener: that port, at the registered host
    registry.snapshot.brokers[2] = PEER._replace(endpoints=PEER.endpoints[:1], grpc_tls_port=9095)
    tls = contextvars.copy_context().run(over_tls)
    assert (tls.host, tls.port, tls.grpc_port) == ("10.0.0.2", 9092, 9095)
    assert controller_broker(registry, 7) == pb.Broker(broker_id=7)  # not in the registry: its id only


# ---------------------------------------------------------------- a cluster without plaintext gRPC


def tls_only_broker(tmp_path: Path, zk_connect: str, broker_id: int,
                    certs: Certs) -> contextlib.AbstractContextManager[RunningBroker]:
    return cluster_broker(tmp_path, zk_connect, broker_id, **{
        **certs.broker_settings("required"), "listeners": "SSL://127.0.0.1:0", "grpc.port": -1,
        "grpc.ssl.port": 0, "security.inter.broker.protocol": "SSL", "offsets.topic.replication.factor": 3})


def produce_all_acked(leader: RunningBroker, alice: ClientSecurity, values: list[bytes]) -> rq.PartitionAck:
    """An acks=all produce to the leader's SSL listener, retried while the followers join the ISR."""
    deadline = time.monotonic() + 30
    while True:
        try:
            with SimpleProducer("127.0.0.1", leader.listener_port("SSL"), acks=rq.Acks.ALL, timeout=10,
                                security=alice) as producer:
                return producer.send(TOPIC, values, 0)
        except RillError:
            assert time.monotonic() < deadline, "no acks=all produce succeeded"
            time.sleep(0.2)


def read_all(broker: RunningBroker, alice: ClientSecurity) -> list[bytes]:
    with SimpleConsumer("127.0.0.1", broker.listener_port("SSL"), timeout=10, security=alice) as consumer:
        return [m.value for m in consumer.fetch(TOPIC, 0, 0)]


def forwarded_group(asked: RunningBroker, brokers: Brokers, alice: ClientSecurity) -> tuple[str, int]:
    """A group created through ``asked`` but coordinated by another broker (so the CreateGroup was forwarded):
    its name and its coordinator's id."""
    deadline = time.monotonic() + 30
    with AdminClient(f"127.0.0.1:{asked.broker.grpc_tls_port}", 10, security=alice) as admin:
        while True:
            for name in (f"group-{i}" for i in range(12)):
                answer = admin.create_group(name, [TOPIC])
                coordinator = answer.coordinator.broker_id
                if answer.error_code == pb.NONE and coordinator != asked.broker_id:
                    assert name in brokers[coordinator].broker.coordination.coordinator.group_names()
                    return name, coordinator
            assert time.monotonic() < deadline, "no CreateGroup was forwarded to another coordinator"
            time.sleep(0.2)


@pytest.mark.slow
def test_a_cluster_without_plaintext_grpc(tmp_path: Path, zk: KazooClient, zk_connect: str, certs: Certs) -> None:
    """With grpc.port = -1 everywhere, LeaderAndIsr, forwarded group calls and ControlledShutdown all get through
    (so over TLS): leaders are elected and applied by every broker, acks=all produces are replicated, groups
    are created and listed through a broker that does not coordinate them, and a stopping leader hands over."""
    alice = from_settings(certs.client("alice"))
    with contextlib.ExitStack() as stack:
        brokers = {i: stack.enter_context(tls_only_broker(tmp_path, zk_connect, i, certs)) for i in (1, 2, 3)}
        for b in brokers.values():
            assert b.broker.grpc_port == -1 and b.broker.grpc_tls_port > 0
            assert b.broker.security.inter_broker_grpc.tls and b.broker.registered_grpc_port == b.broker.grpc_tls_port

        tls_ports = {i: b.broker.grpc_tls_port for i, b in brokers.items()}
        registry = brokers[1].broker.registry
        assert registry is not None
        wait_for(lambda: {i: r.grpc_tls_port for i, r in registry.snapshot.brokers.items()} == tls_ports,
                 timeout=20, what="every broker's TLS gRPC port in the registry (NOT_CONTROLLER's answers name it)")

        create_topic(zk, TOPIC, 1, 3, None, list(brokers))
        wait_for(lambda: leader_of(brokers, TOPIC, 0) is not None, timeout=20, what="a leader")
        leader = leader_of(brokers, TOPIC, 0)
        assert leader is not None
        wait_for(lambda: all(b.broker.replicas.partition_leaders.get(TOPIC, {}).get(0) == leader.broker_id
                             for b in brokers.values()), timeout=20, what="every broker's LeaderAndIsr")

        values = [b"m%d" % i for i in range(50)]
        ack = produce_all_acked(leader, alice, values)
        assert ack.error == 0 and read_all(leader, alice) == values

        asked = brokers[1]
        group, coordinator = forwarded_group(asked, brokers, alice)
        with AdminClient(f"127.0.0.1:{asked.broker.grpc_tls_port}", 10, security=alice) as admin:
            listed = admin.list_groups([group]).groups_info
        assert [(i.group_name, i.error_code, i.controller_broker.broker_id) for i in listed] == \
            [(group, pb.NONE, coordinator)]
        peers = asked.broker.coordination.servicer.peers  # reads the coordinator's address from its registration
        assert peers.address(pb.Broker(broker_id=coordinator, host="elsewhere", grpc_port=1)) == \
            f"127.0.0.1:{brokers[coordinator].broker.grpc_tls_port}"

        # an admin call the controller makes, asked of another broker over TLS: NOT_CONTROLLER names the
        # controller's TLS gRPC port, and the client follows it with its TLS settings
        asked = next(b for b in brokers.values() if b.broker.controller is not None and not b.broker.controller.is_active)
        with AdminClient(f"127.0.0.1:{asked.broker.grpc_tls_port}", 10, security=alice) as admin:
            grown = admin.create_partitions(TOPIC, 2)
        assert grown.error_code == pb.NONE and [p.partition for p in grown.partitions] == [1], grown

        with capture_logs() as logs:
            leader.close()
        events = [e["event"] for e in logs]
        assert "controlled_shutdown.succeeded" in events and "controlled_shutdown.request_failed" not in events
        remaining = {i: b for i, b in brokers.items() if b is not leader}
        wait_for(lambda: leader_of(remaining, TOPIC, 0) is not None, timeout=10, what="the new leader")
        successor = leader_of(remaining, TOPIC, 0)
        assert successor is not None
        assert read_all(successor, alice) == values
