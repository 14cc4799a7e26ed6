"""What ``Producer.metrics()`` reports: counters of the send thread, as a plain dict.

kafka-python's ``KafkaProducer.metrics()`` gives windowed rates from its metrics
library; rill keeps plain totals since the producer started, which a monitoring system
turns into rates itself (seed 003: "incorporate this feedback in the client apis and
allow the user to log or monitor this in the manner they chose").

Counted when a batch ends (acknowledged, retried, failed), when a produce request is
queued and when it is answered (its latency also lands in one of the fixed buckets of
``LATENCY_BUCKETS``: a bisect under the lock already taken, so that the Prometheus
collector, rill.client.client_collectors, exposes a real histogram); ``requests_in_flight``
is set by the send thread at every turn of its loop, the buffer figures are read from the
accumulator when asked.
A message counts once it is *acknowledged* (``acks=none``: once written): ``records_sent``
does not include messages queued or in flight.

Thread-safety: written by the send thread (and, for messages refused before they are
queued, by the caller's threads), read by any thread; one lock, held for a few
additions per batch.
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_left
from typing import Any

__all__ = ["LATENCY_BUCKETS", "ProducerMetrics"]

# upper bounds (seconds) of the request latency histogram, then +Inf: from a produce answered by a broker on
# the same host (under a millisecond) to one that waits out a long fsync or the request timeout (30 s by default)
LATENCY_BUCKETS: tuple[float, ...] = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                      1.0, 2.5, 5.0, 10.0, 30.0)

_TOPIC_COUNTERS = ("records_sent", "bytes_sent", "record_errors", "record_retries")


class ProducerMetrics:
    """Totals since the producer started; see the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals = {"records_sent": 0, "bytes_sent": 0, "batches_sent": 0, "requests_sent": 0,
                        "record_errors": 0, "record_retries": 0}
        self._topics: dict[str, dict[str, int]] = {}
        self._latency_total = 0.0
        self._latency_count = 0
        self._latency_max = 0.0
        self._latency_buckets = [0] * (len(LATENCY_BUCKETS) + 1)  # per bucket (not cumulative), the last +Inf
        self.requests_in_flight = 0  # set by the send thread each turn

    def _add(self, topic: str, name: str, amount: int) -> None:
        """Add to a total and to the topic's (the caller holds the lock)."""
        self._totals[name] += amount
        counters = self._topics.get(topic)
        if counters is None:
            counters = self._topics[topic] = dict.fromkeys(_TOPIC_COUNTERS, 0)
        counters[name] += amount

    def acknowledged(self, topic: str, records: int, size: int) -> None:
        """A batch of ``records`` messages, ``size`` bytes as sent, was acknowledged."""
        with self._lock:
            self._add(topic, "records_sent", records)
            self._add(topic, "bytes_sent", size)
            self._totals["batches_sent"] += 1

    def failed(self, topic: str, records: int) -> None:
        """``records`` messages failed for good (their futures carry the error)."""
        with self._lock:
            self._add(topic, "record_errors", records)

    def retried(self, topic: str, records: int) -> None:
        """``records`` messages go back to their queue for another attempt."""
        with self._lock:
            self._add(topic, "record_retries", records)

    def request_sent(self) -> None:
        with self._lock:
            self._totals["requests_sent"] += 1

    def answered(self, latency: float) -> None:
        """A produce request was answered ``latency`` seconds after it was queued on its connection."""
        with self._lock:
            self._latency_total += latency
            self._latency_count += 1
            self._latency_max = max(self._latency_max, latency)
            self._latency_buckets[bisect_left(LATENCY_BUCKETS, latency)] += 1  # latency == bound: that bucket

    def snapshot(self, buffer_used: int, buffer_total: int) -> dict[str, Any]:
        """The dict ``Producer.metrics()`` returns (docs/clients.md, "Producer metrics").

        ``records_sent``, ``bytes_sent`` (message sets as sent: compressed with gzip),
        ``batches_sent``: acknowledged (``acks=none``: written); ``requests_sent``: produce
        requests; ``record_errors``: messages whose future failed; ``record_retries``:
        messages sent again (once per attempt); ``requests_in_flight``: requests of every
        kind awaiting a response; ``buffer_total_bytes`` / ``buffer_used_bytes`` /
        ``buffer_available_bytes``: ``buffer.memory`` and its use; ``batch_size_avg`` and
        ``records_per_batch_avg`` over acknowledged batches; ``request_latency_avg_ms`` /
        ``request_latency_max_ms``: from a produce request being queued on its connection
        to its response (None before the first answer; there is none with ``acks=none``);
        ``request_latency_buckets_ms``: ``{upper bound in ms: requests answered within it}``,
        cumulative (Prometheus's ``le``), one key per bound of ``LATENCY_BUCKETS`` and ``math.inf``
        last (every answered request); ``request_latency_sum_ms``: their latencies added up;
        ``topics``: per topic, ``records_sent``, ``bytes_sent``, ``record_errors``,
        ``record_retries``.
        """
        with self._lock:
            totals = dict(self._totals)
            topics = {name: dict(counters) for name, counters in sorted(self._topics.items())}
            count, total, peak = self._latency_count, self._latency_total, self._latency_max
            buckets = list(self._latency_buckets)
        batches = totals["batches_sent"]
        return {
            **totals,
            "requests_in_flight": self.requests_in_flight,
            "buffer_total_bytes": buffer_total,
            "buffer_used_bytes": buffer_used,
            "buffer_available_bytes": max(0, buffer_total - buffer_used),
            "batch_size_avg": totals["bytes_sent"] / batches if batches else 0.0,
            "records_per_batch_avg": totals["records_sent"] / batches if batches else 0.0,
            "request_latency_avg_ms": 1000.0 * total / count if count else None,
            "request_latency_max_ms": 1000.0 * peak if count else None,
            "request_latency_buckets_ms": _cumulative(buckets),
            "request_latency_sum_ms": 1000.0 * total,
            "topics": topics,
        }


def _cumulative(counts: list[int]) -> dict[float, int]:
    """Per-bucket counts as ``{upper bound in ms: count at or under it}``, ending with ``math.inf``."""
    out: dict[float, int] = {}
    running = 0
    for bound, n in zip((*LATENCY_BUCKETS, math.inf), counts):
        running += n
        out[bound * 1000.0] = running
    return out
