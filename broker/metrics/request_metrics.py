"""What the data plane counts per request: Kafka's RequestMetrics, on the event-loop thread.

Each request is timed in the phases Kafka's ``RequestMetrics`` splits it into:

- **queue**: from the read that completed its frame to its handler starting (it grows
  when a connection's requests wait behind a held one, or while it is muted);
- **local**: its handler on the event loop;
- **remote**: waiting for something else before its response was ready: a long poll,
  an fsync, the in-sync replicas (observed only for requests that waited);
- **response send**: from its response being ready to its last byte written;
- **total**: from the frame's read to the last byte written (to the handler's end for
  PRODUCE and MULTIPRODUCE, which have no response in 0.7).

A request is counted with the error code at the head of its response (``NONE`` for
responses without one and for 0.7's PRODUCE). Per topic it counts the message bytes and
messages appended and the message bytes read for fetches. The broker's own replication
fetches are counted as REPLICA_FETCH requests, not in the topics' bytes out.

Every figure is a plain ``int``/``float`` written by the loop thread only
(rill.client.bucket_histogram); collectors read them at scrape time. A response
whose request was counted carries ``slot.meta = (TypeStats, received, handled)``; the
connection hands it back through :meth:`TypeStats.sent` once written.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Iterator

from rill.broker.dataplane.server_connection import Slot
from rill.client.bucket_histogram import LoopHistogram
from rill.client.errors import ErrorCode
from rill.client.protocol.requests import RequestType

__all__ = ["PHASES", "RequestMetrics", "TopicCounters", "TypeStats"]

PHASES = ("queue", "local", "remote", "response_send", "total")


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"UNKNOWN_{code}"


class TypeStats:
    """One request type's counts by error and its phase histograms."""

    __slots__ = ("name", "errors", "queue", "local", "remote", "response_send", "total")

    def __init__(self, name: str) -> None:
        self.name = name
        self.errors: dict[int, int] = {}
        self.queue = LoopHistogram()
        self.local = LoopHistogram()
        self.remote = LoopHistogram()
        self.response_send = LoopHistogram()
        self.total = LoopHistogram()

    def count(self, error: int) -> None:
        errors = self.errors
        errors[error] = errors.get(error, 0) + 1

    def sent(self, slot: Slot, now: float) -> None:
        """``slot``'s last byte was written at ``now`` (monotonic seconds)."""
        _, received, handled = slot.meta
        ready = slot.ready_at or handled
        if ready > handled:
            self.remote.observe(ready - handled)
        # LoopHistogram.observe, inlined (the request path: a call costs as much as the work)
        histogram, value = self.response_send, now - ready
        histogram.counts[bisect_left(histogram.bounds, value)] += 1
        histogram.total += value
        histogram, value = self.total, now - received
        histogram.counts[bisect_left(histogram.bounds, value)] += 1
        histogram.total += value
        parts = slot.parts
        head = parts[0] if parts else b""
        self.count(int.from_bytes(head[4:6], "big", signed=True) if isinstance(head, bytes) and len(head) >= 6
                   else 0)

    def error_counts(self) -> Iterator[tuple[str, int]]:
        for code, count in list(self.errors.items()):
            yield _error_name(code), count


class TopicCounters:
    """A topic's message bytes and messages in, and message bytes out to consumers."""

    __slots__ = ("bytes_in", "messages_in", "bytes_out")

    def __init__(self) -> None:
        self.bytes_in = 0
        self.messages_in = 0
        self.bytes_out = 0


class RequestMetrics:
    """The data plane's counters; see the module docstring. Loop thread only, except reads."""

    def __init__(self) -> None:
        self.by_type = {int(kind): TypeStats(kind.name) for kind in RequestType}
        self.topics: dict[str, TopicCounters] = {}

    def handled(self, kind: int, received: float, started: float, slot: Slot | None) -> None:
        """A request of ``kind`` whose frame was read at ``received`` ran from ``started`` to now."""
        now = time.monotonic()
        stats = self.by_type[kind]
        # LoopHistogram.observe, inlined (the request path: a call costs as much as the work)
        histogram, value = stats.queue, started - received if started > received else 0.0
        histogram.counts[bisect_left(histogram.bounds, value)] += 1
        histogram.total += value
        histogram, value = stats.local, now - started
        histogram.counts[bisect_left(histogram.bounds, value)] += 1
        histogram.total += value
        if slot is None:  # no response (0.7 PRODUCE, MULTIPRODUCE)
            stats.total.observe(now - received)
            stats.count(0)
            return
        slot.meta = (stats, received, now)
        if slot.parts is not None:
            slot.ready_at = now

    def topic(self, topic: str) -> TopicCounters:
        counters = self.topics.get(topic)
        if counters is None:
            counters = self.topics[topic] = TopicCounters()
        return counters

    def appended(self, topic: str, nbytes: int, messages: int) -> None:
        counters = self.topic(topic)
        counters.bytes_in += nbytes
        counters.messages_in += messages

    def fetched(self, topic: str, nbytes: int) -> None:
        if nbytes:
            self.topic(topic).bytes_out += nbytes

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's series end (bounded cardinality as topics come and go)."""
        self.topics.pop(topic, None)
