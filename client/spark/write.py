"""Writing a DataFrame to a topic (``df.write.format("rill")`` and ``writeStream``).

Each Spark task sends its rows through one :class:`~rill.client.Producer` (batched and
acknowledged), waits for every acknowledgement, and fails if any message failed.

Delivery is **at-least-once**: a task that fails after some of its messages were
appended is retried by Spark from the start of its partition, and those messages are
appended again; a streaming micro-batch replayed after a crash is sent again too. The
0.7 format has no producer id or sequence number that would let the broker drop the
repeats. Sinks that need exactly-once should de-duplicate on a key in the value.

Columns: ``value`` (binary or string) is required. ``topic`` (string) names the
topic per row unless the ``topic`` option is set; ``partition`` (int, null: the
partitioner chooses) and ``key`` (binary or string: it picks the partition through
the producer's partitioner and is not stored, as the 0.7 format has no key) are
optional.

The metadata connection of the planning check and every task's producer connect with
the query's security options (``kafka.security.protocol``, ``kafka.ssl.*``,
``kafka.sasl.*``; rill.client.spark.security_options), which travel with the writer.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import structlog
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from rill.client.spark.options import SourceOptionError, WriteOptions
from rill.client.spark.planning import cluster
from rill.client.spark.worker_log import worker_logging

__all__ = ["RillWriter", "RillStreamWriter", "WriteResult", "check_write_schema"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class WriteResult(WriterCommitMessage):
    """What one task sent: message count and payload bytes."""

    messages: int
    bytes: int


def check_write_schema(opts: WriteOptions, columns: list[str]) -> None:
    """Refuse, at planning time, a DataFrame the writer cannot send, or a topic that does not exist.

    Raises:
        SourceOptionError: no ``value`` column; no ``topic`` option and no ``topic`` column;
            the topic does not exist; the broker cannot be reached.
    """
    if "value" not in columns:
        raise SourceOptionError(f"writing to rill needs a 'value' column (binary or string); columns are {columns}")
    if opts.topic is None and "topic" not in columns:
        raise SourceOptionError("writing to rill needs the option 'topic' or a 'topic' column")
    if opts.topic is not None:
        with cluster(opts.bootstrap, opts.security) as c:
            c.refresh((opts.topic,), None)


class _ErrorCounter:
    """Counts completed sends and keeps the first error (callbacks run on the producer's thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.first: BaseException | None = None
        self.failed = 0

    def __call__(self, response: Any) -> None:
        error = response.get_error(0)
        if error is not None:
            with self.lock:
                self.failed += len(response)
                self.first = self.first or error


def send_rows(opts: WriteOptions, rows: Iterator[Any]) -> WriteResult:
    """Send every row, wait for the acknowledgements, and raise the first failure."""
    from rill.client.producer import Producer

    worker_logging()
    errors, count, size = _ErrorCounter(), 0, 0
    producer = Producer({"bootstrap.servers": opts.bootstrap, "client.id": "rill-spark-writer", **opts.security,
                         **opts.producer})
    try:
        for row in rows:
            fields = row.asDict()
            value = fields["value"]
            if value is None:
                raise SourceOptionError("a row has a null 'value': rill messages need a value")
            topic = opts.topic or fields.get("topic")
            if topic is None:
                raise SourceOptionError("a row has a null 'topic' and the option 'topic' is not set")
            response = producer.send(topic, bytes(value) if isinstance(value, bytearray) else value,
                                     key=fields.get("key"), partition=fields.get("partition"))
            response.on_completion(errors)
            count += 1
            size += len(value)
        producer.flush()
    finally:
        producer.close()
    if errors.first is not None:
        raise RuntimeError(f"{errors.failed} of {count} messages were not appended (the task is retried: "
                           f"at-least-once): {errors.first}") from errors.first
    log.debug("spark.write_task", messages=count, bytes=size)
    return WriteResult(count, size)


def _total(messages: list[Any]) -> tuple[int, int]:
    done = [m for m in messages if isinstance(m, WriteResult)]
    return sum(m.messages for m in done), sum(m.bytes for m in done)


class RillWriter(DataSourceWriter):
    """A batch write: each task produces its rows."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> WriteResult:
        return send_rows(self.opts, iterator)

    def commit(self, messages: list[Any]) -> None:
        count, size = _total(messages)
        log.info("spark.write_committed", topic=self.opts.topic, messages=count, bytes=size)

    def abort(self, messages: list[Any]) -> None:
        count, _ = _total(messages)
        log.warning("spark.write_aborted", topic=self.opts.topic, messages_already_appended=count)


class RillStreamWriter(DataSourceStreamWriter):
    """A streaming write: each micro-batch's tasks produce their rows (at-least-once)."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> WriteResult:
        return send_rows(self.opts, iterator)

    def commit(self, messages: list[Any], batchId: int) -> None:
        count, size = _total(messages)
        log.info("spark.stream_write_committed", topic=self.opts.topic, batch=batchId, messages=count, bytes=size)

    def abort(self, messages: list[Any], batchId: int) -> None:
        count, _ = _total(messages)
        log.warning("spark.stream_write_aborted", topic=self.opts.topic, batch=batchId,
                    messages_already_appended=count)
