"""Replication between brokers over an authenticated, encrypted listener, with the authorizer on.

Two brokers on a real ZooKeeper, each with a PLAINTEXT and a SASL_SSL listener;
``security.inter.broker.protocol = SASL_SSL`` makes followers fetch from their leaders'
SASL_SSL listener as the SCRAM user ``broker`` (a super user). A replicated topic's
acks=all produce (which waits for the follower) succeeds, and the follower holds every
byte; anonymous clients get nothing.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from rill.broker.cluster.replicated_topics import create_topic
from rill.broker.testing import running_broker
from rill.client.errors import RillError
from rill.client.protocol import requests as rq
from rill.client.security.client_security import from_settings
from rill.client.security.entity_configs_zk import ZkEntityConfigs
from rill.client.security.scram_credentials import CredentialStore
from rill.client.simple import SimpleConsumer, SimpleProducer
from tests.security.tls_fixtures import make_certs

pytestmark = pytest.mark.slow


def test_replicas_fetch_over_sasl_ssl_as_a_super_user(tmp_path: Path, zk: KazooClient, zk_connect: str) -> None:
    certs = make_certs(tmp_path / "certs")
    with ZkEntityConfigs(zk) as configs:
        store = CredentialStore(configs)
        store.set_password("broker", "broker-secret")
        store.set_password("admin", "admin-secret")
    settings = {**certs.broker_settings(), "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://localhost:0",
                "security.inter.broker.protocol": "SASL_SSL", "inter.broker.sasl.username": "broker",
                "inter.broker.sasl.password": "broker-secret", "authorizer.enable": True,
                "super.users": "User:broker;User:admin", "zookeeper.connect": zk_connect,
                "advertised.host.name": "127.0.0.1", "replica.fetch.backoff.ms": 100,
                "zookeeper.session.timeout.ms": 4000}
    with contextlib.ExitStack() as stack:
        brokers = {i: stack.enter_context(running_broker(tmp_path / f"data-{i}", broker_id=i, **settings))
                   for i in (1, 2)}
        create_topic(zk, "secured", 1, 2, None, [1, 2])
        admin = from_settings({"security.protocol": "SASL_SSL", "ssl.cafile": certs.ca,
                               "sasl.mechanism": "SCRAM-SHA-256", "sasl.plain.username": "admin",
                               "sasl.plain.password": "admin-secret"})
        deadline = time.monotonic() + 30
        while True:
            leader = next((b for b in brokers.values()
                           if (r := b.broker.replicas.replicas.get(("secured", 0))) is not None and r.leader_state), None)
            if leader is not None:
                try:
                    with SimpleProducer("localhost", leader.listener_port("SASL_SSL"), acks=rq.Acks.ALL, timeout=10,
                                        security=admin) as producer:
                        ack = producer.send("secured", [b"m%d" % i for i in range(100)], 0)
                    break
                except RillError:
                    pass  # the follower may not be in sync yet: acks=all waits for it, or refuses
            assert time.monotonic() < deadline, "no acks=all produce succeeded over the secured cluster"
            time.sleep(0.2)
        follower = next(b for b in brokers.values() if b is not leader)
        replica = follower.broker.replicas.replicas[("secured", 0)]
        while replica.log.end_offset < ack.next_offset:
            assert time.monotonic() < deadline, "the follower did not copy the leader's bytes"
            time.sleep(0.05)
        with SimpleConsumer("127.0.0.1", leader.port, timeout=5) as anonymous:
            with pytest.raises(RillError, match="TopicAuthorizationFailed"):
                anonymous.fetch("secured", 0, 0)
