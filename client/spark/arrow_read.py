"""The executor side of a read: one byte range of a partition into Arrow record batches.

Runs inside a Spark Python worker. Fetches go to the partition's leader and follow it
when it moves (rill.client.spark.leaders). Each fetch answer (up to ``fetch_bytes`` of whole,
CRC-checked messages) becomes one ``pyarrow.RecordBatch`` in the source's schema
(:data:`SCHEMA_DDL`), so Spark receives columns, not Python rows. Messages inside a
compressed wrapper all carry the wrapper's offset (0.7 semantics), and a wrapper
belongs to the range its offset falls in.

``offsetIndex`` numbers the messages sharing an offset: 0 for an uncompressed message,
0 to n-1 for the n messages of a compressed wrapper in their order inside it, so
``(topic, partition, offset, offsetIndex)`` is unique. It is the same on every read:
a fetch returns whole wrappers only (the client decodes whole messages, and a wrapper is
one message of the log) and ranges are cut at message boundaries, so a wrapper's
messages always arrive together, first to last, in one batch.

``key`` is null (the Kafka 0.7 message format has none). ``timestamp`` is the append
time from the broker's time index (append_times.py; precise to ``log.index.interval.ms``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import structlog

from rill.client.client_config import servers
from rill.client.errors import OffsetOutOfRange
from rill.client.protocol.messages import Message
from rill.client.spark.append_times import AppendTimes
from rill.client.spark.data_loss import skip_deleted
from rill.client.spark.leaders import DEFAULT_WAIT_S, Leader, LeaderReads
from rill.client.spark.ranges import ByteRange
from rill.client.spark.security_options import client_security
from rill.client.structs import TopicPartition

__all__ = ["SCHEMA_DDL", "spark_schema", "arrow_schema", "read_range", "batch_of", "offset_index"]

log = structlog.get_logger(__name__)

# Spark's Kafka source's columns, in its order, then rill's offsetIndex.
SCHEMA_DDL = ("key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
              "timestampType INT, offsetIndex INT")
LOG_APPEND_TIME = 1  # timestampType: Kafka's LogAppendTime (0 would be a producer's CreateTime)


def spark_schema() -> Any:
    """:data:`SCHEMA_DDL` as a StructType (parsing DDL would need a running JVM; executors have none)."""
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType
    from pyspark.sql.types import TimestampType

    return StructType([StructField("key", BinaryType()), StructField("value", BinaryType()),
                       StructField("topic", StringType()), StructField("partition", IntegerType()),
                       StructField("offset", LongType()), StructField("timestamp", TimestampType()),
                       StructField("timestampType", IntegerType()), StructField("offsetIndex", IntegerType())])


def arrow_schema() -> Any:
    """The Arrow schema Spark expects from ``read()`` (checked against the first batch)."""
    import inspect

    from pyspark.sql.pandas.types import to_arrow_schema

    # The call the running pyspark's own worker makes (plan_data_source_read.py): 4.2 replaced
    # timestamp_utc (True by default in 4.0 and 4.1: UTC) with timezone, which has no default.
    if "timezone" in inspect.signature(to_arrow_schema).parameters:
        return to_arrow_schema(spark_schema(), timezone="UTC")
    return to_arrow_schema(spark_schema())


def batch_of(messages: list[Message], topic: str, partition: int, schema: Any, times: AppendTimes) -> Any:
    """One RecordBatch of ``messages`` (all of ``topic``-``partition``), stamped from ``times``."""
    import pyarrow as pa  # type: ignore[import-untyped]

    n = len(messages)
    offsets = [m.offset for m in messages]
    return pa.RecordBatch.from_arrays([
        pa.nulls(n, pa.binary()),
        pa.array([m.value for m in messages], pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        pa.array(times.column(offsets), schema.field("timestamp").type),
        pa.repeat(pa.scalar(LOG_APPEND_TIME, pa.int32()), n),
        offset_index(offsets),
    ], schema=schema)


def offset_index(offsets: list[int]) -> Any:
    """The ``offsetIndex`` column of a batch whose messages have ``offsets`` (ascending; the messages of a
    wrapper share its offset, and a batch holds whole wrappers): each message's place among those sharing
    its offset, counted from 0."""
    import pyarrow as pa
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    column = pa.array(offsets, pa.int64())
    if len(offsets) < 2 or pc.all(pc.greater(column[1:], column[:-1])).as_py():
        return pa.repeat(pa.scalar(0, pa.int32()), len(offsets))  # no compressed wrapper: the common case
    index = [0] * len(offsets)
    for i in range(1, len(offsets)):
        if offsets[i] == offsets[i - 1]:
            index[i] = index[i - 1] + 1
    return pa.array(index, pa.int32())


def read_range(r: ByteRange, fetch_bytes: int, bootstrap: str, wait_s: float = DEFAULT_WAIT_S,
               security: Mapping[str, str] | None = None, fail_on_data_loss: bool = True) -> Iterator[Any]:
    """Yield RecordBatches of every message of ``r`` (``r.start <= offset < r.end``).

    Reads from the leader the planner saw, and follows a new leader (found through
    ``bootstrap``, ``host:port[,...]``) if it moved since, from the same offset. The
    planned end was committed when it was planned, so a leader that has less (a new
    leader whose high watermark has not caught up yet) is waited for, up to ``wait_s``.
    Every connection carries the query's ``security`` settings (client key -> string,
    rill.client.spark.security_options; empty or None: PLAINTEXT), rebuilt here in the task.
    Offsets of the range that retention deleted before they were read fail the task
    (``fail_on_data_loss``) or are skipped with a ``spark.data_loss`` warning (rill.client.spark.data_loss).

    Raises:
        DataLossError: retention deleted part of the range before it was read, and ``fail_on_data_loss``.
        OffsetOutOfRange: the log ends before ``r.end`` for ``wait_s`` (it was truncated); the message says which.
        AuthenticationFailed: a broker refused the TLS handshake or SASL login, at once.
        ConfigError: the security settings cannot be used here (a TLS file missing on this executor).
        BrokerError, CorruptMessageError, ConnectionClosed: from the fetches (a leader that
            cannot be found or reached within ``wait_s``: NotLeaderForPartition, ConnectionClosed).
    """
    schema = arrow_schema()
    offset = r.start
    tp = TopicPartition(r.topic, r.partition)
    with LeaderReads(servers(bootstrap), max_fetch_size=fetch_bytes, wait_s=wait_s,
                     fetch_size_limit=max(fetch_bytes, 64 * 1024 * 1024),
                     security=client_security(security or {})) as reads:
        if r.port:
            reads.assume(tp, Leader(r.host, r.port, r.broker_partition))
        times = AppendTimes(reads, r.topic, r.partition, r.start)
        while offset < r.end:
            try:
                messages = _committed_messages(reads, r, offset, min(fetch_bytes, r.end - offset), wait_s)
            except OffsetOutOfRange:
                low = reads.bounds(tp)[0]
                if offset >= low:
                    raise
                offset = skip_deleted(tp, offset, min(low, r.end), fail=fail_on_data_loss)
                continue
            if messages[-1].offset >= r.end:
                messages = [m for m in messages if m.offset < r.end]
            yield batch_of(messages, r.topic, r.partition, schema, times)
            offset = messages[-1].next_offset  # the last message of a fetch ends a whole wrapper


def _committed_messages(reads: LeaderReads, r: ByteRange, offset: int, size: int, wait_s: float) -> list[Message]:
    """The messages one fetch at ``offset`` returns (at least one), waiting while the leader has none there."""
    deadline = time.monotonic() + wait_s
    pause = 0.05
    while True:
        try:
            messages = reads.fetch(r.topic, r.partition, offset, size)
        except OffsetOutOfRange as exc:
            raise OffsetOutOfRange(f"{r.topic}-{r.partition}: offsets [{offset}, {r.end}) are no longer in the "
                                   f"log (deleted by retention?): {exc}") from exc
        remaining = deadline - time.monotonic()
        if messages:
            return messages
        if remaining <= 0:
            raise OffsetOutOfRange(f"{r.topic}-{r.partition}: the log ends at {offset}, before the planned "
                                   f"end {r.end} (was it truncated?)")
        log.info("spark.waiting_for_committed_data", topic=r.topic, partition=r.partition, offset=offset, end=r.end)
        time.sleep(min(pause, remaining))
        pause = min(2 * pause, 1.0)
