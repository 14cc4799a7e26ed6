"""TLS listeners on the data plane: every client over TLS, and each way a handshake can go wrong.

A broker with a PLAINTEXT and an SSL listener; clients of both kinds (blocking simple
clients, the producer's send thread, the consumer's poll loop) round-trip messages
over TLS, including responses larger than a TLS write chunk (fetches read with pread,
not sendfile). Each bad case (plaintext on the TLS port and the reverse, an unknown
CA, a missing, expired or foreign client certificate, a silent client) fails that
connection alone with a clear error, and the broker goes on serving.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rill.broker.testing import RunningBroker, running_broker
from rill.client import Consumer, Producer
from rill.client.errors import AuthenticationFailed, ConnectionClosed
from rill.client.security.client_security import from_settings
from rill.client.simple import SimpleConsumer, SimpleProducer
from tests.security.tls_fixtures import Certs, make_certs


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    return make_certs(tmp_path / "certs")


@pytest.fixture
def broker(tmp_path: Path, certs: Certs) -> Iterator[RunningBroker]:
    with running_broker(tmp_path / "data", listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                        authentication_timeout_ms=1000, connections_max_idle_ms=60_000,
                        **certs.broker_settings("requested")) as b:
        yield b


def tls_consumer(broker: RunningBroker, settings: dict[str, str], **kwargs: object) -> SimpleConsumer:
    return SimpleConsumer("localhost", broker.listener_port("SSL"), timeout=5,
                          security=from_settings(settings), **kwargs)  # type: ignore[arg-type]


def roundtrip_works(broker: RunningBroker, certs: Certs) -> None:
    """A good TLS client still produces and fetches (the broker is unaffected)."""
    security = from_settings(certs.client(""))
    with SimpleProducer("localhost", broker.listener_port("SSL"), acks=1, timeout=5, security=security) as p:
        p.send("alive", [b"still here"], 0)
    with tls_consumer(broker, certs.client("")) as c:
        assert [m.value for m in c.fetch("alive", 0, 0)] == [b"still here"]


def test_simple_clients_round_trip_over_tls_including_large_fetches(broker: RunningBroker, certs: Certs) -> None:
    security = from_settings(certs.client(""))
    values = [bytes([i]) * 100_000 for i in range(12)]  # 1.2 MB: several TLS write chunks per fetch
    with SimpleProducer("localhost", broker.listener_port("SSL"), acks=1, timeout=5, security=security) as p:
        p.send("big", values, 0)
    with tls_consumer(broker, certs.client(""), max_fetch_size=2_000_000, fetch_size_limit=2_000_000) as c:
        fetched = c.fetch("big", 0, 0)
    assert [m.value for m in fetched] == values
    with SimpleConsumer("127.0.0.1", broker.port, timeout=5, max_fetch_size=2_000_000,
                        fetch_size_limit=2_000_000) as plain:
        assert [m.value for m in plain.fetch("big", 0, 0)] == values  # the same bytes via sendfile


def test_metadata_names_the_listener_the_client_came_in_on(broker: RunningBroker, certs: Certs) -> None:
    with tls_consumer(broker, certs.client("")) as c:
        over_tls = c.metadata([])
    with SimpleConsumer("127.0.0.1", broker.port, timeout=5) as c:
        over_plaintext = c.metadata([])
    assert [b.port for b in over_tls.brokers] == [broker.listener_port("SSL")]
    assert [b.port for b in over_plaintext.brokers] == [broker.port]


def test_producer_and_consumer_over_tls(broker: RunningBroker, certs: Certs) -> None:
    settings = {"bootstrap.servers": f"localhost:{broker.listener_port('SSL')}", **certs.client("alice")}
    with Producer({**settings, "acks": "append", "linger.ms": 2}) as producer:
        futures = [producer.send("secure", f"m{i}".encode()) for i in range(300)]
        producer.flush()
    assert all(f.get(10).offset >= 0 for f in futures)
    consumer = Consumer({**settings, "group.id": None, "consumer.timeout.ms": 3000})
    try:
        consumer.subscribe(["secure"])
        seen = [m.value for m in consumer]
    finally:
        consumer.close()
    assert sorted(seen) == sorted(f"m{i}".encode() for i in range(300))


def test_a_client_certificate_names_the_principal(broker: RunningBroker, certs: Certs) -> None:
    with tls_consumer(broker, certs.client("alice")) as c:
        c.metadata([])
        principals = {conn.principal for conn in list(broker.server.connections.values()) if conn.listener == "SSL"}
    assert principals == {"User:alice"}


def test_plaintext_client_on_the_tls_port_fails_alone(broker: RunningBroker, certs: Certs) -> None:
    with pytest.raises(ConnectionClosed):
        with SimpleConsumer("127.0.0.1", broker.listener_port("SSL"), timeout=3) as c:
            c.metadata([])
    roundtrip_works(broker, certs)


def test_tls_client_on_the_plaintext_port_is_told_so(broker: RunningBroker, certs: Certs) -> None:
    security = from_settings(certs.client(""))
    with pytest.raises(AuthenticationFailed, match="TLS handshake"):
        SimpleConsumer("localhost", broker.port, timeout=3, security=security).metadata([])
    roundtrip_works(broker, certs)


def test_a_broker_certificate_from_an_unknown_ca_is_refused(broker: RunningBroker, certs: Certs) -> None:
    settings = {**certs.client(""), "ssl.cafile": certs.path("other-ca.pem")}
    with pytest.raises(AuthenticationFailed, match="certificate was refused"):
        tls_consumer(broker, settings).metadata([])
    roundtrip_works(broker, certs)


@pytest.fixture
def strict_broker(tmp_path: Path, certs: Certs) -> Iterator[RunningBroker]:
    with running_broker(tmp_path / "strict", listeners="SSL://127.0.0.1:0", **certs.broker_settings("required")) as b:
        yield b


@pytest.mark.parametrize("client", ["", "expired", "stranger"])
def test_required_client_certificates_refuse_missing_expired_and_foreign(
        strict_broker: RunningBroker, certs: Certs, client: str) -> None:
    with pytest.raises(ConnectionClosed):
        with tls_consumer(strict_broker, certs.client(client)) as c:
            c.metadata([])  # TLS 1.3: the client learns of the refusal at its first read
    with tls_consumer(strict_broker, certs.client("alice")) as c:
        assert [b.port for b in c.metadata([]).brokers] == [strict_broker.listener_port("SSL")]


def test_a_client_that_never_finishes_its_handshake_is_closed(broker: RunningBroker, certs: Certs) -> None:
    silent = socket.create_connection(("127.0.0.1", broker.listener_port("SSL")), timeout=10)
    try:
        started = time.monotonic()
        assert silent.recv(1) == b""  # closed by the broker (authentication.timeout.ms = 1000)
        assert time.monotonic() - started < 8
    finally:
        silent.close()
    roundtrip_works(broker, certs)
