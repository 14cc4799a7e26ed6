"""Producer.metrics() against a real in-process broker: what was acknowledged, per topic, and the buffer."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rill.broker.testing import RunningBroker, running_broker
from rill.client.errors import WrongPartition
from rill.client.producer import Producer
from rill.client.simple import SimpleConsumer


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with running_broker(tmp_path / "data", num_partitions=2) as b:
        with SimpleConsumer(b.host, b.port, timeout=10) as client:
            client.create_topic("a", 2)
            client.create_topic("b", 1)
        yield b


def test_acknowledged_messages_bytes_batches_and_latency(broker: RunningBroker) -> None:
    """After a flush every message is counted as sent, with its encoded bytes (payload + 10), per topic; the
    requests have a latency; the buffer is free again and nothing is in flight."""
    values = [f"value-{i}".encode() for i in range(10)]
    with Producer(bootstrap_servers=broker.address, buffer_memory=1_000_000) as p:
        assert p.metrics()["records_sent"] == 0
        for v in values:
            p.send("a", v)
        p.send_many("b", values[:5])
        p.flush(10)
        deadline = time.monotonic() + 5
        while p.metrics()["requests_in_flight"] and time.monotonic() < deadline:
            time.sleep(0.01)
        m = p.metrics()
    assert m["records_sent"] == 15 and m["record_errors"] == 0 and m["record_retries"] == 0
    assert m["bytes_sent"] == sum(len(v) + 10 for v in values + values[:5])
    assert m["topics"]["a"]["records_sent"] == 10 and m["topics"]["b"]["records_sent"] == 5
    assert m["topics"]["b"]["bytes_sent"] == sum(len(v) + 10 for v in values[:5])
    assert m["batches_sent"] >= 3 and m["requests_sent"] >= 1  # two partitions of a, one of b
    assert 0 < m["request_latency_avg_ms"] <= m["request_latency_max_ms"] < 10_000
    assert (m["buffer_used_bytes"], m["buffer_available_bytes"], m["buffer_total_bytes"]) == (0, 1_000_000, 1_000_000)
    assert m["requests_in_flight"] == 0


def test_a_refused_message_is_an_error_of_its_topic(broker: RunningBroker) -> None:
    """A send to a partition the topic does not have fails on its future and counts as an error."""
    with Producer(bootstrap_servers=broker.address) as p:
        p.send("b", b"ok").get_offset(10)
        assert isinstance(p.send("b", b"nope", partition=7).get_error(10), WrongPartition)
        m = p.metrics()
    assert (m["records_sent"], m["record_errors"]) == (1, 1)
    assert m["topics"]["b"]["record_errors"] == 1


def test_buffer_use_shows_queued_messages(broker: RunningBroker) -> None:
    """Messages waiting for linger.ms count as used buffer until they are acknowledged."""
    with Producer(bootstrap_servers=broker.address, linger_ms=60_000, buffer_memory=100_000) as p:
        p.send("b", b"x" * 90)  # queued: the long linger keeps it
        p.send("b", b"y" * 90)
        m = p.metrics()
        assert m["buffer_used_bytes"] == 200 and m["buffer_available_bytes"] == 100_000 - 200
        p.flush(10)
        assert p.metrics()["buffer_used_bytes"] == 0
