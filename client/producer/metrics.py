"""What ``Producer.metrics()`` reports: counters of the send thread, as a plain dict.

kafka-python's ``KafkaProducer.metrics()`` gives windowed rates from its metrics
library; rill keeps plain totals since the producer started, which a monitoring system
turns into rates itself (seed 003: "incorporate this feedback in the client apis and
allow the user to log or monitor this in the manner they chose").

Counted when a batch ends (acknowledged, retried, failed), when a produce request is
queued and when it is answered; ``requests_in_flight`` is set by the send thread at
every turn of its loop, the buffer figures are read from the accumulator when asked.
A message counts once it is *acknowledged* (``acks=none``: once written): ``records_sent``
does not include messages queued or in flight.

Thread-safety: written by the send thread (and, for messages refused before they are
queued, by the caller's threads), read by any thread; one lock, held for a few
additions per batch.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["ProducerMetrics"]

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
        ``topics``: per topic, ``records_sent``, ``bytes_sent``, ``record_errors``,
        ``record_retries``.
        """
        with self._lock:
            totals = dict(self._totals)
            topics = {name: dict(counters) for name, counters in sorted(self._topics.items())}
            count, total, peak = self._latency_count, self._latency_total, self._latency_max
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
            "topics": topics,
        }
