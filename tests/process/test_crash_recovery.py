"""The real ``rill-broker`` killed with -9 mid-stream, restarted, and checked."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from rill.client.errors import ErrorCode
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import decode_message_set, encode_message_set

from tests.conftest import RawClient
from tests.process.broker_process import BrokerProcess

pytestmark = pytest.mark.slow


def _produce_until_killed(port: int, acks: int, acked: list[bytes], stop: threading.Event) -> None:
    """Pipeline PRODUCE_ACKs of unique payloads; record each acknowledged one."""
    client = RawClient("127.0.0.1", port)
    seq = 0
    try:
        while not stop.is_set() and seq < 200_000:
            batch = [b"msg-%08d-" % (seq + i) + b"p" * 100 for i in range(20)]
            seq += 20
            body = client.request(rq.encode_produce_ack(
                [rq.ProduceRequest("crash", seq // 20 % 2, encode_message_set(batch))], acks))
            ack = rq.decode_produce_ack_response(body)[1][0]
            if ack.error == 0:
                acked.extend(batch)
    except (ConnectionError, OSError):
        pass  # the broker was killed
    finally:
        client.close()


def _read_all(port: int, partition: int) -> list[bytes]:
    client = RawClient("127.0.0.1", port)
    values: list[bytes] = []
    offset = 0
    while True:
        error, data = rq.decode_fetch_response(client.request(rq.encode_fetch("crash", partition, offset, 1 << 20)))
        assert error == 0, ErrorCode(error).name
        if not data:
            break
        messages, consumed = decode_message_set(data, "crash", partition, offset)  # raises on any bad CRC
        values.extend(m.value for m in messages)
        offset += consumed
    client.close()
    return values


@pytest.mark.parametrize("acks", [rq.Acks.FSYNC, rq.Acks.APPEND], ids=["acks-fsync", "acks-append"])
def test_kill_9_loses_no_acknowledged_message(tmp_path: Path, acks: int) -> None:
    """Every message acknowledged before kill -9 is served after restart, and nothing invalid is."""
    data = tmp_path / "data"
    broker = BrokerProcess(data, "--set", "num.partitions=2", "--set", "log.segment.bytes=200000").start()
    acked: list[bytes] = []
    stop = threading.Event()
    producer = threading.Thread(target=_produce_until_killed, args=(broker.port, acks, acked, stop))
    producer.start()
    deadline = time.monotonic() + 30
    while len(acked) < 20_000 and time.monotonic() < deadline:
        time.sleep(0.05)
    broker.kill9()
    stop.set()
    producer.join(timeout=30)
    assert len(acked) >= 2_000, "the producer made too little progress to test anything"

    restarted = BrokerProcess(data).start()
    try:
        stored = _read_all(restarted.port, 0) + _read_all(restarted.port, 1)
    finally:
        assert restarted.terminate() == 0
    missing = set(acked) - set(stored)
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:3]}"
    assert len(stored) == len(set(stored)), "a message is stored twice"
    assert any(e.get("event", "").startswith("recovery") or "recover" in e.get("event", "")
               for e in restarted.events()), "the restart after kill -9 did not run recovery"


def test_sigterm_is_clean_and_restart_skips_recovery(tmp_path: Path) -> None:
    """SIGTERM flushes and marks a clean shutdown; the next start does no recovery scan."""
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    client = RawClient("127.0.0.1", broker.port)
    body = client.request(rq.encode_produce_ack([rq.ProduceRequest("clean", 0, encode_message_set([b"x"] * 10))]))
    assert rq.decode_produce_ack_response(body)[1][0].error == 0
    client.close()
    assert broker.terminate() == 0
    assert (data / ".rill-clean-shutdown").exists()
    again = BrokerProcess(data).start()
    try:
        assert not [e for e in again.events() if e.get("event") == "recovery.scanned"]
        client = RawClient("127.0.0.1", again.port)
        error, stored = rq.decode_fetch_response(client.request(rq.encode_fetch("clean", 0, 0, 1 << 20)))
        assert bytes(stored) == encode_message_set([b"x"] * 10)
        client.close()
    finally:
        again.terminate()
