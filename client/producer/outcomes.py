"""What becomes of the batches the producer's send thread sends (seed 003).

Every batch taken from the accumulator ends in one of three ways, all decided here:

- *completed*: its PRODUCE_ACK entry carries the first offset (with ``acks=none``, once
  its request is written; every offset is then -1);
- *retried*: its request failed with a retriable error (a broken connection, a request
  timeout, a broker's retriable code); it goes back to the front of its partition's
  queue after ``retry.backoff.ms``, at most ``retries`` times. A request that was never
  written at all is put back without counting;
- *failed*: anything else, including a ready batch that could not be sent by its
  deadline (no leader, broker unreachable).

Completing or failing a batch releases its bytes of ``buffer.memory`` and runs its
futures' callbacks (:func:`run_callbacks`: one that raises is logged as
``producer.callback_failed`` and the others still run). Each outcome is counted in
:class:`~rill.client.producer.metrics.ProducerMetrics`.

Not thread-safe: the send thread only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from rill.client.errors import error_for_code
from rill.client.producer.accumulator import PartitionQueue, ProducerBatch, RecordAccumulator
from rill.client.producer.errors import ProducerTimeout, is_retriable
from rill.client.producer.in_flight import BrokerLink, InFlight, Kind
from rill.client.producer.metrics import ProducerMetrics
from rill.client.protocol import requests as rq
from rill.client.protocol.framing import DecodeError

if TYPE_CHECKING:
    from rill.client.producer.sender import SenderConfig

log = structlog.get_logger(__name__)

__all__ = ["BatchOutcomes", "run_callbacks"]


def run_callbacks(callbacks: Sequence[Callable[[], Any]], client_id: str) -> None:
    """Run completion callbacks; one that raises is logged and the others still run."""
    for callback in callbacks:
        try:
            callback()
        except Exception:
            log.exception("producer.callback_failed", client_id=client_id)


class BatchOutcomes:
    """Completes, retries or fails the send thread's batches (see the module doc).

    ``stopping()`` says whether the send thread is ending: then nothing is retried.
    """

    def __init__(self, accumulator: RecordAccumulator, config: SenderConfig, stopping: Callable[[], bool],
                 metrics: ProducerMetrics | None = None) -> None:
        self.acc = accumulator
        self.config = config
        self._stopping = stopping
        self.metrics = metrics if metrics is not None else ProducerMetrics()
        self.audit: Callable[[ProducerBatch], None] | None = None
        """Called with each batch acknowledged with offsets (rill.client.producer.audit_ledger), if set."""

    def complete(self, batch: ProducerBatch, first_offset: int) -> None:
        batch.first_offset = first_offset
        if self.audit is not None and first_offset >= 0:
            self.audit(batch)
        self.metrics.acknowledged(batch.topic, _records(batch), len(batch.encoded) if batch.encoded else batch.size)
        self._finish(batch)

    def fail(self, batch: ProducerBatch, error: BaseException) -> None:
        batch.error = error
        self.metrics.failed(batch.topic, _records(batch))
        self._finish(batch)

    def _finish(self, batch: ProducerBatch) -> None:
        batch.encoded = None
        batch.payloads = []
        self.acc.release(batch, batch.size)
        run_callbacks(batch.resolve(), self.config.client_id)

    def retry_or_fail(self, batches: Sequence[ProducerBatch], error: BaseException, now: float,
                      unsent: Sequence[ProducerBatch] = ()) -> None:
        """Fail ``batches`` with ``error``, or put them back for another attempt when it is
        retriable and they have attempts left; ``unsent`` (never written) go back uncounted.
        Order within each partition is kept."""
        retry: list[ProducerBatch] = []
        retriable = is_retriable(error) and not self._stopping()
        for batch in batches:
            if retriable and batch.attempts < self.config.retries:
                self.metrics.retried(batch.topic, _records(batch))
                batch.attempts += 1
                batch.not_before = now + self.config.retry_backoff
                batch.deadline = batch.not_before + self.config.request_timeout
                retry.append(batch)
            else:
                self.fail(batch, error)
        if retry:
            log.warning("producer.retry", client_id=self.config.client_id, batches=len(retry),
                        partitions=sorted({f"{b.topic}-{b.partition}" for b in retry}),
                        attempt=max(b.attempts for b in retry), retries=self.config.retries, error=str(error))
        if retry or unsent:
            self.acc.requeue([*retry, *unsent])

    def settle(self, requests: Sequence[tuple[InFlight, bool]], error: BaseException, now: float) -> None:
        """Settle the produce requests that were in flight on a connection that broke, each
        with whether any of its bytes were written: those not written at all go back as they
        were, the others are retried or failed with ``error``. Other kinds of request are ignored."""
        sent: list[ProducerBatch] = []
        unsent: list[ProducerBatch] = []
        for request, started in requests:
            if request.kind is not Kind.PRODUCE:
                continue
            (sent if started else unsent).extend(request.batches)
        self.retry_or_fail(sent, error, now, unsent)

    def on_produce(self, link: BrokerLink, request: InFlight, body: memoryview, now: float) -> bool:
        """Complete, retry or fail the batches of ``request`` from its PRODUCE_ACK response.

        Returns:
            Whether the broker refused a partition in a way that says what the producer knows
            of the cluster is stale (UnknownTopic, WrongPartition, NotLeaderForPartition, a
            leader epoch fenced or unknown: errors with ``invalid_metadata``).
        """
        batches = request.batches
        try:
            error, acks = rq.decode_produce_ack_response(body)
            if not error and len(acks) != len(batches):
                raise DecodeError(f"produce response has {len(acks)} acknowledgements for {len(batches)} partitions")
        except DecodeError as exc:
            for batch in batches:
                self.fail(batch, exc)
            return False
        if error:
            self.retry_or_fail(batches, error_for_code(error, f"produce to {link.name}: {error_for_code(error)}"), now)
            return False
        stale = False
        failed: dict[int, list[ProducerBatch]] = {}
        for batch, ack in zip(batches, acks):
            if ack.error == 0:
                self.complete(batch, ack.first_offset)
            else:
                failed.setdefault(ack.error, []).append(batch)
        for code, group in failed.items():
            refusal = error_for_code(code, f"produce to {group[0].topic}-{group[0].partition}: {error_for_code(code)}")
            if refusal.invalid_metadata:  # unknown topic or partition, or not (or no longer) the leader
                stale = True
            self.retry_or_fail(group, refusal, now)
        return stale

    def expire(self, queue: PartitionQueue, now: float, reason: Callable[[str, int], str]) -> None:
        """Fail the ready batches of ``queue`` that could not be sent by their deadline;
        ``reason(topic, partition)`` says why (asked only when some did expire)."""
        expired = self.acc.expire(queue, now)
        if not expired:
            return
        why = reason(queue.topic, queue.partition)
        count = sum(map(_records, expired))
        log.warning("producer.batch_expired", client_id=self.config.client_id, topic=queue.topic,
                    partition=queue.partition, messages=count, reason=why)
        error = ProducerTimeout(f"{count} message(s) for {queue.topic}-{queue.partition} not sent within "
                                f"request.timeout.ms={self.config.request_timeout * 1000:.0f}: {why}")
        for batch in expired:
            self.fail(batch, error)


def _records(batch: ProducerBatch) -> int:
    """How many messages ``batch`` holds (their lengths once encoded, their payloads before)."""
    return len(batch.lengths) or len(batch.payloads)
