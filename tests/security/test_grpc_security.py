"""gRPC with TLS and credentials: the same settings and the same users as the data plane.

A client with ``security.protocol`` SASL_SSL reaches the coordinator and admin services
on the broker's TLS gRPC port (METADATA names it to clients of TLS listeners) and sends
its user and password with each call; wrong credentials fail the call with
UNAUTHENTICATED before any handler runs. With ``ssl.client.auth = required`` the
client's certificate authenticates it instead, and a client without one is refused at
the handshake.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rill.broker.testing import RunningBroker, running_broker
from rill.client import Consumer, Producer
from rill.client.cli.main import main as rill
from rill.client.errors import ConnectionClosed
from rill.client.grpc_client import AdminClient
from rill.client.security.client_security import from_settings
from rill.client.simple import SimpleConsumer
from rill.client.security.scram_credentials import CredentialStore
from rill.client.security.entity_configs_file import FileEntityConfigs
from tests.security.tls_fixtures import Certs, make_certs


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    return make_certs(tmp_path / "certs")


def add_user(data: Path, user: str, password: str) -> None:
    with FileEntityConfigs(data) as configs:
        CredentialStore(configs).set_password(user, password)


@pytest.fixture
def broker(tmp_path: Path, certs: Certs) -> Iterator[RunningBroker]:
    data = tmp_path / "data"
    data.mkdir()
    add_user(data, "alice", "alice-secret")  # before the broker starts, as an operator's first user
    with running_broker(data, listeners="PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0", grpc_ssl_port=0,
                        **certs.broker_settings()) as b:
        yield b


def sasl_ssl(certs: Certs, password: str = "alice-secret") -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "ssl.cafile": certs.ca, "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.plain.username": "alice", "sasl.plain.password": password}


def test_metadata_gives_tls_clients_the_tls_grpc_port(broker: RunningBroker, certs: Certs) -> None:
    with SimpleConsumer("127.0.0.1", broker.listener_port("SASL_SSL"), timeout=5,
                        security=from_settings(sasl_ssl(certs))) as c:
        over_tls = c.metadata([]).brokers[0]
    with SimpleConsumer("127.0.0.1", broker.port, timeout=5) as c:
        over_plaintext = c.metadata([]).brokers[0]
    assert over_tls.grpc_port == broker.broker.grpc_tls_port != over_plaintext.grpc_port == broker.grpc_port


def test_admin_calls_over_tls_with_credentials(broker: RunningBroker, certs: Certs) -> None:
    address = f"localhost:{broker.broker.grpc_tls_port}"
    with AdminClient(address, 5, security=from_settings(sasl_ssl(certs))) as admin:
        assert admin.create_group("secured", ["t"]).error_code == 0
        assert [g.group_name for g in admin.list_groups().groups_info] == ["secured"]
    with AdminClient(address, 5, security=from_settings(sasl_ssl(certs, "wrong"))) as admin:
        with pytest.raises(ConnectionClosed, match="UNAUTHENTICATED"):
            admin.list_groups()
    plaintext = f"127.0.0.1:{broker.grpc_port}"
    with AdminClient(plaintext, 5, security=from_settings({**sasl_ssl(certs, "wrong"),
                                                           "security.protocol": "SASL_PLAINTEXT"})) as admin:
        with pytest.raises(ConnectionClosed, match="UNAUTHENTICATED"):
            admin.list_groups()  # credentials are checked on the plaintext port too


def test_a_consumer_group_over_sasl_ssl(broker: RunningBroker, certs: Certs, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    settings = {"bootstrap.servers": f"localhost:{broker.listener_port('SASL_SSL')}", **sasl_ssl(certs)}
    with Producer(settings) as producer:
        for i in range(50):
            producer.send("grouped", f"m{i}".encode(), partition=0)
        producer.flush()
    consumer = Consumer({**settings, "group.id": "secure-group", "enable.auto.commit": False})
    try:
        consumer.subscribe(["grouped"])
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(seen) < 50 and time.monotonic() < deadline:
            seen += [m.value for m in consumer.poll(500)]
        consumer.commit()
    finally:
        consumer.close()
    assert sorted(seen) == sorted(f"m{i}".encode() for i in range(50))
    config = tmp_path / "alice.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in sasl_ssl(certs).items()))
    capsys.readouterr()
    assert rill(["groups", "describe", "secure-group", "-b", f"localhost:{broker.listener_port('SASL_SSL')}",
                 "--command-config", str(config)]) == 0
    assert "grouped\t0\t" in capsys.readouterr().out


def test_client_certificates_authenticate_grpc_when_required(tmp_path: Path, certs: Certs) -> None:
    with running_broker(tmp_path / "mtls", listeners="SSL://127.0.0.1:0", grpc_ssl_port=0,
                        **certs.broker_settings("required")) as b:
        address = f"localhost:{b.broker.grpc_tls_port}"
        with AdminClient(address, 5, security=from_settings(certs.client("alice"))) as admin:
            assert admin.list_groups().groups_info == []
        with AdminClient(address, 3, security=from_settings(certs.client(""))) as admin:
            with pytest.raises(ConnectionClosed, match="UNAVAILABLE"):
                admin.list_groups()  # no certificate: refused at the handshake
