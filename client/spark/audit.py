"""The audit job (seed 001, "Kafka@LinkedIn"): are the messages the producers were acknowledged still there?

Producers with ``audit.topic`` set send, per topic and send window, an event naming the
offset ranges the broker acknowledged (rill.client.producer.audit_ledger gives the format).
This job reads the events and the topics with the ``rill`` source (batch), counts the
messages present inside each range, and sums per topic and window of ``window_ms``
(each producer window goes to the window holding its start, so ``window_ms`` should be
a multiple of the producers' ``audit.window.ms``).

The check is exact: offsets are byte positions, so a message is in a range when
``first_offset <= offset < next_offset``, and messages of a compressed wrapper share
the wrapper's offset. The count of a range is compared with the messages found in it;
a range with fewer is short by the difference (one with more, which only a log whose
offsets were reused after truncation can give, does not hide a loss elsewhere).

The range join: both sides get a bucket number, ``offset // bucket_bytes`` (a range gets
every bucket it touches), so Spark joins on (topic, partition, bucket) and only then
checks the offsets: each message meets the one or two ranges of its bucket instead of
every range of its partition. ``bucket_bytes`` follows the mean range size. Each
partition is read only from its first audited offset on (:func:`reading_starts`).

``security`` holds the client security settings (``security.protocol``, ``ssl.*``,
``sasl.*``, as strings); both reads pass them to the source as its ``kafka.``-prefixed
options, and the driver's offset lookups use them too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from rill.client.spark.security_options import PREFIX
from rill.client.structs import TopicPartition

__all__ = ["AuditReport", "WindowAudit", "audit", "reading_starts", "EVENT_SCHEMA"]

log = structlog.get_logger(__name__)

EVENT_SCHEMA = ("producer STRING, host STRING, topic STRING, window_start_ms BIGINT, window_ms BIGINT, "
                "count BIGINT, ranges ARRAY<ARRAY<BIGINT>>")
MIN_BUCKET_BYTES = 4096
MAX_BUCKET_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class WindowAudit:
    """One topic in one window: messages the producers were acknowledged (``expected``), those
    found inside their ranges, and how many are ``missing``; ``producers`` sent events for it."""

    topic: str
    window_start_ms: int
    producers: int
    expected: int
    found: int
    missing: int


@dataclass(frozen=True, slots=True)
class AuditReport:
    """The windows (sorted by topic and start), the events read, and the events that were not valid."""

    windows: tuple[WindowAudit, ...]
    events: int
    bad_events: int

    @property
    def missing(self) -> int:
        return sum(w.missing for w in self.windows)


def _source(spark: Any, bootstrap: str, topics: list[str], security: Mapping[str, str],
            starting: str = "earliest") -> Any:
    return (spark.read.format("rill").option("bootstrap", bootstrap).option("subscribe", ",".join(topics))
            .option("startingOffsets", starting).option("endingOffsets", "latest")
            .options(**{PREFIX + k: v for k, v in security.items()}).load())


def reading_starts(bootstrap: str, topics: list[str], firsts: dict[TopicPartition, int],
                   security: Mapping[str, str] | None = None) -> dict[str, dict[str, int]]:
    """``startingOffsets`` for the messages side: each partition from the index entry at or
    before its first audited offset (-2, the log start, if that is gone), partitions
    nobody audited not at all (-1, the log end). Older messages cannot fall in any range."""
    from rill.client.errors import OffsetOutOfRange
    from rill.client.protocol import requests as rq
    from rill.client.spark.planning import cluster

    with cluster(bootstrap, security) as c:
        counts = c.refresh(tuple(topics), None)
        starts = {t: {str(p): -1 for p in range(n)} for t, n in counts.items()}
        for (topic, partition), first in firsts.items():
            if partition >= counts.get(topic, 0):
                continue  # a range naming a partition that does not exist: nothing to read, all missing
            log_start, end = c.bounds(TopicPartition(topic, partition))
            start = rq.EARLIEST_TIME  # -2: whatever the log start is when the job reads
            if log_start < first < end:
                try:
                    start = c.reads.time_index(topic, partition, first, 1)[0][0]
                except OffsetOutOfRange:
                    pass  # retention moved the log start past it meanwhile: from the start
            elif first >= end:
                start = end
            starts[topic][str(partition)] = start
    return starts


def _ranges(spark: Any, bootstrap: str, topics: list[str], audit_topic: str, window_ms: int,
            since_ms: int | None, security: Mapping[str, str]) -> tuple[Any, int, int]:
    """The ranges of the events about ``topics`` (one row each, with its window), the number of
    events read and of events that could not be parsed."""
    from pyspark.sql import functions as F

    raw = _source(spark, bootstrap, [audit_topic], security).select(
        F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
    valid = F.col("e.topic").isNotNull() & F.col("e.window_start_ms").isNotNull() & F.col("e.ranges").isNotNull()
    counts = raw.agg(F.count(F.lit(1)).alias("n"), F.sum(F.when(valid, 0).otherwise(1)).alias("bad")).first()
    events = raw.where(valid).select("e.*").where(F.col("topic").isin(topics))
    window = F.floor(F.col("window_start_ms") / window_ms) * window_ms
    if since_ms is not None:
        events = events.where(window >= since_ms)
    ranges = (events.select("topic", "producer", window.cast("long").alias("window"), F.explode("ranges").alias("r"))
              .where(F.size("r") == 4)
              .select("topic", "producer", "window", F.col("r")[0].cast("int").alias("partition"),
                      F.col("r")[1].alias("first"), F.col("r")[2].alias("next"), F.col("r")[3].alias("count"))
              .withColumn("rid", F.monotonically_increasing_id()))
    return ranges, int(counts["n"] or 0), int(counts["bad"] or 0)


def _bucket_bytes(ranges: Any) -> int:
    from pyspark.sql import functions as F

    mean = ranges.agg(F.avg(F.col("next") - F.col("first"))).first()[0]
    return int(min(MAX_BUCKET_BYTES, max(MIN_BUCKET_BYTES, mean or 0)))


def audit(spark: Any, bootstrap: str, topics: list[str], audit_topic: str, window_ms: int,
          since_ms: int | None = None, *, security: Mapping[str, str] | None = None) -> AuditReport:
    """Compare the audit events about ``topics`` with the messages present (see the module doc).

    ``since_ms``: only windows starting at or after it (ms since the epoch). Windows without
    events are not reported: nothing was claimed for them. ``security``: the client security
    settings (client key -> string; None: PLAINTEXT).

    Raises:
        SourceOptionError: a topic or the audit topic does not exist, or the security settings are
            malformed or refused (from the rill source).
    """
    from pyspark.sql import functions as F

    security = dict(security or {})
    ranges, events, bad = _ranges(spark, bootstrap, topics, audit_topic, window_ms, since_ms, security)
    ranges = ranges.cache()
    try:
        bucket = _bucket_bytes(ranges)
        keyed = ranges.withColumn("bucket", F.explode(F.sequence(
            F.floor(F.col("first") / bucket), F.floor((F.greatest(F.col("next"), F.col("first") + 1) - 1) / bucket))))
        firsts = {TopicPartition(str(r["topic"]), int(r["partition"])): int(r["first"])
                  for r in ranges.groupBy("topic", "partition").agg(F.min("first").alias("first")).collect()}
        starting = json.dumps(reading_starts(bootstrap, topics, firsts, security))
        messages = (_source(spark, bootstrap, topics, security, starting).select("topic", "partition", "offset")
                    .withColumn("bucket", F.floor(F.col("offset") / bucket)))
        joined = keyed.alias("r").join(
            messages.alias("m"),
            (F.col("r.topic") == F.col("m.topic")) & (F.col("r.partition") == F.col("m.partition"))
            & (F.col("r.bucket") == F.col("m.bucket")) & (F.col("m.offset") >= F.col("r.first"))
            & (F.col("m.offset") < F.col("r.next")), "left")
        found = joined.groupBy("r.rid").agg(F.count("m.offset").alias("found"))
        per_range = ranges.join(found, "rid", "left").fillna(0, ["found"])
        rows = (per_range.groupBy("topic", "window")
                .agg(F.countDistinct("producer").alias("producers"), F.sum("count").alias("expected"),
                     F.sum("found").alias("found"),
                     F.sum(F.greatest(F.col("count") - F.col("found"), F.lit(0))).alias("missing"))
                .orderBy("topic", "window").collect())
    finally:
        ranges.unpersist()
    windows = tuple(WindowAudit(r["topic"], int(r["window"]), int(r["producers"]), int(r["expected"]),
                                int(r["found"]), int(r["missing"])) for r in rows)
    report = AuditReport(windows, events, bad)
    log.info("spark.audit_done", topics=topics, audit_topic=audit_topic, window_ms=window_ms, events=events,
             bad_events=bad, windows=len(windows), missing=report.missing, bucket_bytes=bucket)
    if report.missing:
        for w in windows:
            if w.missing:
                log.warning("spark.audit_missing", topic=w.topic, window_start_ms=w.window_start_ms,
                            expected=w.expected, found=w.found, missing=w.missing)
    return report
