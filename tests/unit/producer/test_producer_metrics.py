"""Producer.metrics(): the counters' arithmetic, and retries and errors against a fake broker."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from rill.client.producer import Producer, ProducerTimeout
from rill.client.producer.metrics import LATENCY_BUCKETS, ProducerMetrics
from rill.client.protocol import requests as rq

from tests.unit.producer.test_sender import FakeBroker, metadata_answer


def test_totals_averages_and_per_topic_counts() -> None:
    """Acknowledged batches add to the totals and to their topic; averages are over acknowledged batches
    and answered requests; nothing answered yet gives None latencies."""
    m = ProducerMetrics()
    assert m.snapshot(0, 100)["request_latency_avg_ms"] is None
    m.acknowledged("a", 3, 60)
    m.acknowledged("b", 1, 20)
    m.failed("a", 2)
    m.retried("b", 1)
    m.request_sent()
    m.answered(0.002)
    m.answered(0.004)
    snap = m.snapshot(30, 100)
    assert (snap["records_sent"], snap["bytes_sent"], snap["batches_sent"], snap["requests_sent"]) == (4, 80, 2, 1)
    assert (snap["record_errors"], snap["record_retries"]) == (2, 1)
    assert (snap["buffer_used_bytes"], snap["buffer_available_bytes"], snap["buffer_total_bytes"]) == (30, 70, 100)
    assert snap["batch_size_avg"] == 40.0 and snap["records_per_batch_avg"] == 2.0
    assert snap["request_latency_avg_ms"] == pytest.approx(3.0) and snap["request_latency_max_ms"] == pytest.approx(4.0)
    assert snap["topics"] == {"a": {"records_sent": 3, "bytes_sent": 60, "record_errors": 2, "record_retries": 0},
                              "b": {"records_sent": 1, "bytes_sent": 20, "record_errors": 0, "record_retries": 1}}


@pytest.fixture
def silent_on_produce() -> Iterator[FakeBroker]:
    """Answers METADATA and never answers a produce."""
    broker = FakeBroker(lambda kind, req, port: metadata_answer(req, port) if kind == rq.RequestType.METADATA
                        else None)
    yield broker
    broker.close()


def test_a_retried_then_failed_message_is_counted_as_both(silent_on_produce: FakeBroker) -> None:
    """A produce that is never answered: sent twice (retries=1), one retry and one error counted, nothing sent."""
    with Producer(bootstrap_servers=f"127.0.0.1:{silent_on_produce.port}", request_timeout_ms=300,
                  retries=1, retry_backoff_ms=10) as p:
        assert isinstance(p.send("t", b"x").get_error(timeout=10), ProducerTimeout)
        snap = p.metrics()
    assert (snap["requests_sent"], snap["record_retries"], snap["record_errors"], snap["records_sent"]) == (2, 1, 1, 0)
    assert snap["topics"]["t"]["record_errors"] == 1
    assert snap["request_latency_avg_ms"] is None  # never answered


def test_request_latencies_land_in_cumulative_buckets() -> None:
    """Each answered request counts in the first bucket whose bound (ms) it does not exceed, and in every later
    one; the last bucket (inf) counts every answer and the sum adds their latencies."""
    m = ProducerMetrics()
    empty = m.snapshot(0, 1)
    assert set(empty["request_latency_buckets_ms"].values()) == {0} and empty["request_latency_sum_ms"] == 0.0
    for latency in (0.0002, 0.001, 0.0011, 7.0, 99.0):  # 1 ms exactly is in the 1 ms bucket
        m.answered(latency)
    snap = m.snapshot(0, 1)
    buckets = snap["request_latency_buckets_ms"]
    assert list(buckets) == [b * 1000.0 for b in LATENCY_BUCKETS] + [math.inf]
    assert (buckets[0.5], buckets[1.0], buckets[2.5], buckets[5000.0], buckets[10000.0], buckets[30000.0],
            buckets[math.inf]) == (1, 2, 3, 3, 4, 4, 5)
    assert snap["request_latency_sum_ms"] == pytest.approx(1000.0 * (0.0002 + 0.001 + 0.0011 + 7.0 + 99.0))
