"""The partition cap (partitions_created_max): a user creates at most so many partitions, counted in its entity.

alice may create 5 partitions: 3, then 2 more, are created; a topic of 3 beyond that is
refused with PartitionLimitReached, as is a produce that would auto-create one; the
count is kept in her entity (where every broker of a cluster would read it), and an
operator resets it. bob, without a cap, is not counted at all.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rill.broker.security.partition_cap import COUNT_KEY
from rill.broker.testing import RunningBroker, running_broker
from rill.client.blocking_connection import BrokerConnection
from rill.client.cli.main import main as rill
from rill.client.errors import ErrorCode
from rill.client.protocol import messages as m
from rill.client.protocol import requests as rq
from rill.client.security.client_security import from_settings
from rill.client.security.entity_configs_file import FileEntityConfigs
from rill.client.security.scram_credentials import CredentialStore


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    data = tmp_path / "data"
    data.mkdir()
    with FileEntityConfigs(data) as configs:
        for user in ("alice", "bob"):
            CredentialStore(configs).set_password(user, f"{user}-secret")
    assert rill(["quotas", "set", "--user", "alice", "--partitions-max", "5", "--data-dir", str(data)]) == 0
    with running_broker(data, listeners="SASL_PLAINTEXT://127.0.0.1:0") as b:
        yield b


def connect(broker: RunningBroker, user: str) -> BrokerConnection:
    security = from_settings({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                              "sasl.plain.username": user, "sasl.plain.password": f"{user}-secret"})
    return BrokerConnection("127.0.0.1", broker.listener_port("SASL_PLAINTEXT"), 5, security=security)


def create(conn: BrokerConnection, topic: str, partitions: int) -> int:
    return rq.decode_create_topic_response(conn.request(rq.encode_create_topic(topic, partitions)))[0]


def stored_count(broker: RunningBroker, user: str) -> int:
    with FileEntityConfigs(broker.broker.config["log.dir"]) as configs:
        return int(configs.get(f"users/{user}").get(COUNT_KEY, "0"))


def test_a_user_creates_partitions_up_to_the_cap(broker: RunningBroker) -> None:
    with connect(broker, "alice") as alice:
        assert create(alice, "a1", 3) == 0
        assert create(alice, "a2", 2) == 0
        assert create(alice, "a3", 3) == ErrorCode.PARTITION_LIMIT_REACHED
        body = alice.request(rq.encode_produce_ack([rq.ProduceRequest("a4", 0, m.encode_message_set([b"x"]))]))
        assert rq.decode_produce_ack_response(body)[1][0].error == ErrorCode.PARTITION_LIMIT_REACHED
    assert "a3" not in broker.broker.logs.topics() and "a4" not in broker.broker.logs.topics()
    deadline = time.monotonic() + 10
    while stored_count(broker, "alice") != 5:
        assert time.monotonic() < deadline, "the count never reached alice's entity"
        time.sleep(0.05)
    with connect(broker, "bob") as bob:
        assert create(bob, "b1", 8) == 0  # no cap: not counted
    assert stored_count(broker, "bob") == 0


def test_an_operator_resets_the_count(broker: RunningBroker) -> None:
    with connect(broker, "alice") as alice:
        assert create(alice, "a1", 5) == 0
        assert create(alice, "a2", 1) == ErrorCode.PARTITION_LIMIT_REACHED
    deadline = time.monotonic() + 10
    while stored_count(broker, "alice") != 5:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert rill(["quotas", "set", "--user", "alice", "--delete", COUNT_KEY,
                 "--data-dir", broker.broker.config["log.dir"]]) == 0
    broker.broker.security.configs.poll()  # type: ignore[union-attr]  (the watcher would, within a second)
    with connect(broker, "alice") as alice:
        assert create(alice, "a2", 1) == 0


def test_admin_create_topic_counts_against_the_same_cap(broker: RunningBroker) -> None:
    from rill.client.grpc_client import AdminClient
    from rill.v1 import coordinator_pb2 as pb

    security = from_settings({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                              "sasl.plain.username": "alice", "sasl.plain.password": "alice-secret"})
    with AdminClient(f"127.0.0.1:{broker.grpc_port}", 10, security=security) as admin:
        assert admin.create_topic("g1", 4).error_code == pb.NONE
        refused = admin.create_topic("g2", 2)
    assert refused.error_code == pb.PARTITION_LIMIT_REACHED and "partitions_created_max" in refused.error_message
    with connect(broker, "alice") as alice:
        assert create(alice, "a1", 1) == 0  # 4 + 1: the cap is shared by both planes
        assert create(alice, "a2", 1) == ErrorCode.PARTITION_LIMIT_REACHED
