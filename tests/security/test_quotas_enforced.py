"""Client quotas hold a client to its rate by muting its connection, while other clients run free.

alice has a produce quota and a fetch quota (set as an operator sets them, with
``rill quotas set --data-dir``); bob has none. Each drives a broker as fast as it can
from its own thread; alice's measured rate must be within 10% of her quota while bob,
at the same time, goes many times faster. Nothing alice sends is refused or lost: she
is only slowed. Short rate windows (11 x 0.1 s) let the rate settle within the test's
seconds; the defaults (11 x 1 s) behave the same over longer runs (the quota manager's
tests show both).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rill.broker.testing import RunningBroker, running_broker
from rill.client.cli.main import main as rill
from rill.client.security.client_security import from_settings
from rill.client.security.entity_configs_file import FileEntityConfigs
from rill.client.security.scram_credentials import CredentialStore
from rill.client.simple import SimpleConsumer, SimpleProducer

QUOTA = 400_000  # bytes per second
BATCH = [b"q" * 1000] * 20  # about 20 KB per produce


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    data = tmp_path / "data"
    data.mkdir()
    with FileEntityConfigs(data) as configs:
        for user in ("alice", "bob"):
            CredentialStore(configs).set_password(user, f"{user}-secret")
    assert rill(["quotas", "set", "--user", "alice", "--producer-byte-rate", str(QUOTA),
                 "--consumer-byte-rate", str(QUOTA), "--data-dir", str(data)]) == 0
    assert rill(["quotas", "set", "--user", "bob", "--client-id", "etl", "--producer-byte-rate", str(QUOTA),
                 "--data-dir", str(data)]) == 0
    with running_broker(data, listeners="SASL_PLAINTEXT://127.0.0.1:0", quota_window_size_seconds=0.1) as b:
        yield b


def security(user: str) -> object:
    return from_settings({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                          "sasl.plain.username": user, "sasl.plain.password": f"{user}-secret"})


def produce_for(broker: RunningBroker, user: str, topic: str, seconds: float, out: dict[str, float],
                client_id: str = "") -> None:
    """Produce as fast as acknowledgements allow; record the bytes per second after a 1 s warm-up
    (in ``out`` under the user's name, or its client id)."""
    with SimpleProducer("127.0.0.1", broker.listener_port("SASL_PLAINTEXT"), acks=1, timeout=60,
                        security=security(user), client_id=client_id) as producer:  # type: ignore[arg-type]
        started = time.monotonic()
        counted, since = 0, None
        while time.monotonic() - started < seconds:
            ack = producer.send(topic, BATCH, 0)
            assert ack.next_offset > ack.first_offset  # appended, never refused
            if since is None and time.monotonic() - started >= 1.0:
                since = time.monotonic()
            elif since is not None:
                counted += sum(len(v) for v in BATCH)
        out[client_id or user] = counted / (time.monotonic() - since) if since else 0.0


def test_a_producer_is_held_to_its_quota_while_another_runs_free(broker: RunningBroker) -> None:
    rates: dict[str, float] = {}
    threads = [threading.Thread(target=produce_for, args=(broker, user, f"{user}-topic", 6.0, rates))
               for user in ("alice", "bob")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    print("rates", rates)
    assert abs(rates["alice"] / QUOTA - 1) < 0.10, rates
    assert rates["bob"] > 4 * QUOTA, rates


def test_a_consumer_is_held_to_its_quota(broker: RunningBroker) -> None:
    with SimpleProducer("127.0.0.1", broker.listener_port("SASL_PLAINTEXT"), acks=1, timeout=30,
                        security=security("bob")) as producer:  # type: ignore[arg-type]
        for _ in range(200):  # 4 MB to read
            producer.send("to-read", BATCH, 0)
    with SimpleConsumer("127.0.0.1", broker.listener_port("SASL_PLAINTEXT"), timeout=60, max_fetch_size=50_000,
                        security=security("alice")) as consumer:  # type: ignore[arg-type]
        offset, started, counted, since = 0, time.monotonic(), 0, None
        while time.monotonic() - started < 6.0:
            fetched = consumer.fetch("to-read", 0, offset)
            if not fetched:
                offset = 0
                continue
            size = fetched[-1].next_offset - offset  # the message bytes the broker sent
            offset = fetched[-1].next_offset
            if since is None and time.monotonic() - started >= 1.0:
                since = time.monotonic()
            elif since is not None:
                counted += size
    rate = counted / (time.monotonic() - since) if since else 0.0
    print("fetch rate", rate)
    assert abs(rate / QUOTA - 1) < 0.10, rate


def test_a_client_id_quota_holds_that_client_only(broker: RunningBroker) -> None:
    """bob's quota is on his client id "etl" (users/bob/clients/etl): that client is held to it, his
    other client (client id "adhoc") is not. rill's clients name themselves with CLIENT_HELLO."""
    rates: dict[str, float] = {}
    threads = [threading.Thread(target=produce_for, args=(broker, "bob", f"{cid}-topic", 6.0, rates, cid))
               for cid in ("etl", "adhoc")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    print("rates", rates)
    assert abs(rates["etl"] / QUOTA - 1) < 0.10, rates
    assert rates["adhoc"] > 4 * QUOTA, rates
