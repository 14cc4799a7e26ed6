"""SASL on the data plane: PLAIN and SCRAM over SASL_PLAINTEXT and SASL_SSL, and every way it is refused.

Users are added as an operator adds them (``rill users add --data-dir``) while the
broker runs. A wrong password, an unknown user, a mechanism the listener does not
offer, a request before authenticating, SASL on a listener without it and an
oversized first frame each end that connection with a clear answer; the broker goes
on serving authenticated clients.
"""

from __future__ import annotations

import socket
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rill.broker.testing import RunningBroker, running_broker
from rill.client import Consumer, Producer
from rill.client.cli.main import main as rill
from rill.client.errors import AuthenticationFailed, ErrorCode
from rill.client.protocol import requests as rq
from rill.client.protocol import sasl_requests as sasl
from rill.client.security.client_security import from_settings
from rill.client.simple import SimpleConsumer, SimpleProducer
from tests.security.tls_fixtures import Certs, make_certs

LISTENERS = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    return make_certs(tmp_path / "certs")


@pytest.fixture
def broker(tmp_path: Path, certs: Certs) -> Iterator[RunningBroker]:
    data = tmp_path / "data"
    with running_broker(data, listeners=LISTENERS, **certs.broker_settings()) as b:
        for user, password in (("alice", "alice-secret"), ("bob", "bob-secret")):
            assert rill(["users", "add", user, "--password", password, "--data-dir", str(data)]) == 0
        assert rill(["users", "add", "carol", "--password", "carol-secret", "--mechanism", "SCRAM-SHA-512",
                     "--data-dir", str(data)]) == 0
        deadline = time.monotonic() + 10
        while b.broker.security.credentials.lookup("carol", "SCRAM-SHA-512") is None:  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the broker never saw the users added"
            time.sleep(0.05)
        yield b


def client_settings(broker: RunningBroker, certs: Certs, mechanism: str, user: str, password: str,
                    listener: str = "SASL_PLAINTEXT") -> dict[str, str]:
    settings = {"security.protocol": listener, "sasl.mechanism": mechanism, "sasl.plain.username": user,
                "sasl.plain.password": password}
    if listener == "SASL_SSL":
        settings["ssl.cafile"] = certs.ca
    return settings


def consumer(broker: RunningBroker, settings: dict[str, str]) -> SimpleConsumer:
    return SimpleConsumer("localhost", broker.listener_port(settings["security.protocol"]), timeout=5,
                          security=from_settings(settings))


@pytest.mark.parametrize("mechanism,user,password,listener", [
    ("SCRAM-SHA-256", "alice", "alice-secret", "SASL_PLAINTEXT"),
    ("SCRAM-SHA-512", "carol", "carol-secret", "SASL_PLAINTEXT"),
    ("PLAIN", "bob", "bob-secret", "SASL_SSL"),
    ("SCRAM-SHA-256", "alice", "alice-secret", "SASL_SSL"),
])
def test_each_mechanism_authenticates_and_names_the_principal(
        broker: RunningBroker, certs: Certs, mechanism: str, user: str, password: str, listener: str) -> None:
    settings = client_settings(broker, certs, mechanism, user, password, listener)
    port = broker.listener_port(listener)
    with SimpleProducer("localhost", port, acks=1, timeout=5, security=from_settings(settings)) as p:
        p.send("sasl-topic", [f"{user} was here".encode()], 0)
        principals = {c.principal for c in list(broker.server.connections.values()) if c.listener == listener}
    assert principals == {f"User:{user}"}
    with consumer(broker, settings) as c:
        assert f"{user} was here".encode() in [m.value for m in c.fetch("sasl-topic", 0, 0)]
        assert [b.port for b in c.metadata([]).brokers] == [port]


def test_producer_and_consumer_with_scram(broker: RunningBroker, certs: Certs) -> None:
    settings = {"bootstrap.servers": f"localhost:{broker.listener_port('SASL_SSL')}",
                **client_settings(broker, certs, "SCRAM-SHA-256", "alice", "alice-secret", "SASL_SSL")}
    with Producer({**settings, "linger.ms": 2}) as producer:
        futures = [producer.send("scram-topic", f"m{i}".encode()) for i in range(200)]
        producer.flush()
    assert all(f.get(10).offset >= 0 for f in futures)
    reader = Consumer({**settings, "group.id": None, "consumer.timeout.ms": 3000})
    try:
        reader.subscribe(["scram-topic"])
        assert sorted(m.value for m in reader) == sorted(f"m{i}".encode() for i in range(200))
    finally:
        reader.close()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
def test_wrong_password_and_unknown_user_are_refused_alike(broker: RunningBroker, certs: Certs, mechanism: str) -> None:
    messages = []
    for user, password in (("alice", "wrong"), ("mallory", "whatever")):
        with pytest.raises(AuthenticationFailed, match="SASL .* failed") as failure:
            consumer(broker, client_settings(broker, certs, mechanism, user, password)).metadata([])
        messages.append(str(failure.value).replace(user, "USER"))
    assert messages[0] == messages[1]
    with consumer(broker, client_settings(broker, certs, "SCRAM-SHA-256", "alice", "alice-secret")) as c:
        c.metadata([])  # the broker goes on serving


def test_scram_failures_take_the_same_time_for_a_wrong_password_and_an_unknown_user(
        broker: RunningBroker, certs: Certs) -> None:
    def attempt(user: str, password: str) -> float:
        started = time.perf_counter()
        with pytest.raises(AuthenticationFailed):
            consumer(broker, client_settings(broker, certs, "SCRAM-SHA-256", user, password)).metadata([])
        return time.perf_counter() - started

    wrong = [attempt("alice", "wrong") for _ in range(15)]
    unknown = [attempt("mallory", "wrong") for _ in range(15)]
    # both fail at the proof, after the same PBKDF2 on the client (the broker hands out a stable fake salt)
    assert 0.5 < statistics.median(wrong) / statistics.median(unknown) < 2.0


def test_a_mechanism_the_listener_does_not_offer_is_named(tmp_path: Path, certs: Certs) -> None:
    with running_broker(tmp_path / "d", listeners="SASL_PLAINTEXT://127.0.0.1:0",
                        sasl_enabled_mechanisms="SCRAM-SHA-512") as b:
        settings = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                    "sasl.plain.username": "alice", "sasl.plain.password": "x"}
        with pytest.raises(AuthenticationFailed, match="offers SCRAM-SHA-512"):
            SimpleConsumer("127.0.0.1", b.listener_port("SASL_PLAINTEXT"), timeout=5,
                           security=from_settings(settings)).metadata([])


def raw_exchange(port: int, frame: bytes) -> tuple[bytes, bytes]:
    """Send ``frame`` on a fresh connection; return the response frame and what follows (b"": closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(frame)
        data = b""
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
            chunk = sock.recv(65536)
            assert chunk, f"closed without an answer after {data!r}"
            data += chunk
        return data, sock.recv(1)


def test_a_request_before_authenticating_is_answered_and_the_connection_closed(broker: RunningBroker) -> None:
    response, after = raw_exchange(broker.listener_port("SASL_PLAINTEXT"), rq.encode_metadata([]))
    assert int.from_bytes(response[4:6], "big", signed=True) == ErrorCode.ILLEGAL_SASL_STATE
    assert after == b""


def test_sasl_on_a_listener_without_it_is_answered_and_the_connection_closed(broker: RunningBroker) -> None:
    response, after = raw_exchange(broker.port, sasl.encode_sasl_handshake("PLAIN"))
    assert int.from_bytes(response[4:6], "big", signed=True) == ErrorCode.ILLEGAL_SASL_STATE
    assert after == b""


def test_an_unauthenticated_client_cannot_send_a_large_frame(broker: RunningBroker) -> None:
    with socket.create_connection(("127.0.0.1", broker.listener_port("SASL_PLAINTEXT")), timeout=5) as sock:
        sock.sendall((10 * 1024 * 1024).to_bytes(4, "big") + b"\x00\x07")  # 10 MiB: over 512 KiB
        assert sock.recv(1) == b""  # closed at the size field, nothing reserved for it
    with consumer(broker, {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                           "sasl.plain.username": "alice", "sasl.plain.password": "alice-secret"}) as c:
        c.metadata([])


def test_the_cli_takes_credentials_from_command_config(broker: RunningBroker, certs: Certs, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    import io
    import sys

    good, bad = tmp_path / "alice.properties", tmp_path / "wrong.toml"
    good.write_text(f"# as kafka's --command-config\nsecurity.protocol=SASL_SSL\nssl.cafile={certs.ca}\n"
                    "sasl.mechanism=SCRAM-SHA-256\nsasl.plain.username=alice\nsasl.plain.password=alice-secret\n")
    bad.write_text(f'security.protocol = "SASL_SSL"\nssl.cafile = "{certs.ca}"\n'
                   'sasl = {mechanism = "SCRAM-SHA-256", plain = {username = "alice", password = "nope"}}\n')
    address = f"localhost:{broker.listener_port('SASL_SSL')}"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"one\ntwo\n")))
    assert rill(["produce", "--topic", "cli-t", "-b", address, "--command-config", str(good)]) == 0
    capsysbinary.readouterr()
    assert rill(["consume", "--topic", "cli-t", "-b", address, "--command-config", str(good)]) == 0
    assert sorted(capsysbinary.readouterr().out.split()) == [b"one", b"two"]
    assert rill(["topics", "list", "-b", address, "--command-config", str(bad)]) == 1
    assert b"authentication" in capsysbinary.readouterr().err


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_garbage_tokens_are_refused_cleanly(broker: RunningBroker, certs: Certs, mechanism: str) -> None:
    import random

    rng = random.Random(16)
    port = broker.listener_port("SASL_PLAINTEXT")
    for _ in range(20):
        token = rng.randbytes(rng.randrange(0, 300))
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(sasl.encode_sasl_handshake(mechanism) + sasl.encode_sasl_authenticate(token))
            data = b""
            while True:  # two answers, then the broker closes the connection
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        handshake_size = int.from_bytes(data[:4], "big")
        answer = data[4 + handshake_size:]
        assert int.from_bytes(answer[4:6], "big", signed=True) == ErrorCode.SASL_AUTHENTICATION_FAILED
    with consumer(broker, client_settings(broker, certs, "SCRAM-SHA-256", "alice", "alice-secret")) as c:
        c.metadata([])  # the broker is unaffected
