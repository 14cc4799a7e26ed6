"""Audit events (seed 001, "Kafka@LinkedIn"): which offsets a producer got acknowledged, per send window.

Turned on by the producer setting ``audit.topic`` (off by default). The Kafka 0.7 message
format has no timestamp, so the windows are the *producer's send windows*: a batch counts
in the window of its send time, ``floor(send time / audit.window.ms)``, where its send time
is when its first message was handed to ``send`` (the batch's creation, on the monotonic
clock, turned into wall-clock time when it is acknowledged). Only acknowledged batches
count, with the exact offsets the broker gave them, so the audit job can check each
range message by message.

For every (topic, window) with acknowledged messages, one event goes to the audit topic,
a UTF-8 JSON object::

    {"producer": "<client.id>", "host": "<hostname>", "topic": "orders",
     "window_start_ms": 1700000040000, "window_ms": 60000, "count": 1234,
     "ranges": [[partition, first_offset, next_offset, count], ...]}

``ranges`` are sorted by partition and offset; contiguous batches of a partition are
merged into one range. Events are *additive*: a batch acknowledged after its window's
event went out (a slow retry) goes in a further event for the same window, a window with
more than ``MAX_RANGES_PER_EVENT`` ranges is split over several events, and the audit job
sums the events of a (topic, window).

When events go out: the audit thread sends a window's event once the window has ended
(plus a short grace for acknowledgements still on the way); ``flush`` sends the events of
windows that have ended; ``close`` sends every window's, the current one included. A
producer that dies without closing loses the events of the windows it had not yet sent.

Pieces: :class:`AuditLedger` is the bookkeeping (pure, clocks injectable);
:class:`AuditEmitter` owns the audit thread and turns ledger entries into messages.

Thread-safety: :meth:`AuditLedger.record` runs on the producer's send thread, the
``take_*`` methods on the audit thread or a caller's thread; one lock guards the ledger.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from rill.client.errors import RillError

if TYPE_CHECKING:
    from rill.client.producer.batches import ProducerBatch
    from rill.client.producer.future import SendResponse

__all__ = ["AuditEvent", "AuditLedger", "AuditEmitter", "Range"]

log = structlog.get_logger(__name__)

Range = tuple[int, int, int, int]  # (partition, first offset, next offset, message count)
Clock = Callable[[], float]

MAX_GRACE_MS = 5000  # the longest an ended window waits for acknowledgements still on the way
MAX_RANGES_PER_EVENT = 5000  # more go in further events for the same window (about 40 bytes a range)


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """The acknowledged messages of one topic in one send window.

    ``window_start_ms``: ms since the epoch, a multiple of ``window_ms``. ``ranges``:
    sorted, non-overlapping, each ``[first_offset, next_offset)`` holding ``count`` messages.
    """

    topic: str
    window_start_ms: int
    window_ms: int
    ranges: tuple[Range, ...]

    @property
    def count(self) -> int:
        return sum(r[3] for r in self.ranges)

    def to_json(self, producer: str, host: str) -> bytes:
        """The event as the audit topic's message (the format in the module doc)."""
        return json.dumps({"producer": producer, "host": host, "topic": self.topic,
                           "window_start_ms": self.window_start_ms, "window_ms": self.window_ms,
                           "count": self.count, "ranges": [list(r) for r in self.ranges]},
                          separators=(",", ":")).encode("utf-8")


def _merged(ranges: dict[int, list[list[int]]]) -> tuple[Range, ...]:
    """Sort each partition's ranges and merge the contiguous ones."""
    out: list[Range] = []
    for partition in sorted(ranges):
        current: list[int] | None = None
        for first, end, count in sorted(ranges[partition]):
            if current is not None and current[1] == first:
                current[1], current[2] = end, current[2] + count
                continue
            if current is not None:
                out.append((partition, current[0], current[1], current[2]))
            current = [first, end, count]
        if current is not None:
            out.append((partition, current[0], current[1], current[2]))
    return tuple(out)


class AuditLedger:
    """Acknowledged ranges per (topic, send window), until their event is taken.

    ``wall`` (seconds since the epoch) and ``monotonic`` (the clock batches are created
    with) are injectable for tests. Messages of ``audit_topic`` itself are not counted.
    """

    def __init__(self, audit_topic: str, window_ms: int, *, wall: Clock = time.time,
                 monotonic: Clock = time.monotonic) -> None:
        if window_ms <= 0:
            raise ValueError(f"window_ms must be > 0, got {window_ms}")
        self.audit_topic = audit_topic
        self.window_ms = window_ms
        self._wall = wall
        self._monotonic = monotonic
        self._lock = threading.Lock()
        # (topic, window start ms) -> partition -> [[first, next, count], ...] (contiguous ones merged as they come)
        self._open: dict[tuple[str, int], dict[int, list[list[int]]]] = {}

    def window_of(self, sent_at: float) -> int:
        """The start (ms since the epoch) of the window of ``sent_at`` (a monotonic time)."""
        wall_ms = (self._wall() - (self._monotonic() - sent_at)) * 1000
        return int(wall_ms // self.window_ms) * self.window_ms

    def record(self, topic: str, partition: int, first_offset: int, next_offset: int, count: int,
               sent_at: float) -> None:
        """Count ``count`` messages acknowledged at ``[first_offset, next_offset)`` of
        ``topic``-``partition``, sent at ``sent_at`` (monotonic seconds)."""
        if topic == self.audit_topic or count <= 0:
            return
        key = (topic, self.window_of(sent_at))
        with self._lock:
            partitions = self._open.get(key)
            if partitions is None:
                partitions = self._open[key] = {}
            ranges = partitions.get(partition)
            if ranges is None:
                partitions[partition] = [[first_offset, next_offset, count]]
                return
            last = ranges[-1]
            if last[1] == first_offset:
                last[1] = next_offset
                last[2] += count
            else:
                ranges.append([first_offset, next_offset, count])

    def record_batch(self, batch: ProducerBatch) -> None:
        """:meth:`record` an acknowledged batch (its ``encoded`` message set is still there)."""
        size = len(batch.encoded) if batch.encoded is not None else sum(batch.lengths) + 10 * len(batch.lengths)
        self.record(batch.topic, batch.partition, batch.first_offset, batch.first_offset + size,
                    len(batch.lengths), batch.created)

    def pending(self) -> int:
        """How many (topic, window) entries wait for their event."""
        with self._lock:
            return len(self._open)

    def take_due(self, grace_ms: int = 0) -> list[AuditEvent]:
        """Take the events of the windows that ended at least ``grace_ms`` ago (none: [])."""
        now_ms = self._wall() * 1000
        return self._take(lambda start: start + self.window_ms + grace_ms <= now_ms)

    def take_all(self) -> list[AuditEvent]:
        """Take the events of every window, the current one included (none: [])."""
        return self._take(lambda start: True)

    def _take(self, ready: Callable[[int], bool]) -> list[AuditEvent]:
        with self._lock:
            keys = sorted(k for k in self._open if ready(k[1]))
            taken = [(k, self._open.pop(k)) for k in keys]
        events = []
        for (topic, start), ranges in taken:
            merged = _merged(ranges)
            for i in range(0, len(merged), MAX_RANGES_PER_EVENT):
                events.append(AuditEvent(topic, start, self.window_ms, merged[i:i + MAX_RANGES_PER_EVENT]))
        return events


class AuditEmitter:
    """Sends the ledger's events to the audit topic: from its own daemon thread as windows
    end, and when asked (``flush``, ``close``).

    ``send(topic, value)`` is the producer's ``send``. A failed event is logged
    (``producer.audit_event_failed``); its window stays unaudited.
    """

    def __init__(self, ledger: AuditLedger, send: Callable[[str, bytes], SendResponse], producer: str,
                 host: str) -> None:
        self.ledger = ledger
        self.producer = producer
        self.host = host
        self.grace_ms = min(ledger.window_ms // 4, MAX_GRACE_MS)
        self._send = send
        self._stop = threading.Event()
        self._emit_lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name=f"rill-audit-{producer}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Stop the audit thread (the ledger keeps what it holds, for :meth:`emit_all`)."""
        self._stop.set()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join()

    def emit_due(self) -> list[SendResponse]:
        """Send the events of the windows that have ended; their responses."""
        with self._emit_lock:
            return self._emit(self.ledger.take_due(self.grace_ms))

    def emit_all(self) -> list[SendResponse]:
        """Send the events of every window, the current one included; their responses."""
        with self._emit_lock:
            return self._emit(self.ledger.take_all())

    def _emit(self, events: list[AuditEvent]) -> list[SendResponse]:
        responses = []
        for event in events:
            try:
                response = self._send(self.ledger.audit_topic, event.to_json(self.producer, self.host))
            except RillError as exc:  # closed, buffer full: this window goes unaudited
                self._failed(event, exc)
                continue
            response.on_completion(functools.partial(self._sent, event=event))
            responses.append(response)
        return responses

    def _sent(self, response: SendResponse, event: AuditEvent) -> None:
        error = response.get_error(0)
        if error is not None:
            self._failed(event, error)
        else:
            log.debug("producer.audit_event_sent", client_id=self.producer, topic=event.topic,
                      window_start_ms=event.window_start_ms, count=event.count)

    def _failed(self, event: AuditEvent, error: BaseException) -> None:
        log.warning("producer.audit_event_failed", client_id=self.producer, topic=event.topic,
                    window_start_ms=event.window_start_ms, count=event.count, error=str(error))

    def _run(self) -> None:
        window = self.ledger.window_ms
        while True:
            now_ms = time.time() * 1000
            next_check = (now_ms // window + 1) * window + self.grace_ms
            if self._stop.wait((next_check - now_ms) / 1000):
                return
            try:
                self.emit_due()
            except Exception:  # the thread must outlive a bug in one turn
                log.exception("producer.audit_thread_error", client_id=self.producer)
