"""The streaming reader: per-partition byte offsets in Spark's checkpoint.

An offset of this source is ``{"topic": {"partition": byte_offset}}`` (partition keys
are strings: offsets travel as JSON). Spark writes the end offset of each micro-batch to
its checkpoint before running it, so a restarted query re-reads exactly the ranges it
had not committed: exactly-once into an idempotent or transactional sink.

``initialOffset``, ``latestOffset``, ``partitions`` and ``commit`` run in one long-lived
Python process on the driver; ``read`` runs in executors on a pickled copy (the reader
holds no connection, so it pickles). Partitions that appear after the query started
(a new topic matching ``subscribePattern``) are read from their log start.

Micro-batch limits (rill.client.spark.trigger_limits): ``maxOffsetsPerTrigger`` caps the
messages of a micro-batch (counted on the driver), ``maxBytesPerTrigger`` its bytes;
``minOffsetsPerTrigger`` holds a micro-batch back until that many messages are there or
``maxTriggerDelay`` passed since the last one. ``Trigger.AvailableNow`` (pyspark 4.2+,
``prepareForTriggerAvailableNow``) reads up to the log ends as they were when the query
started, in micro-batches capped in the same way (``minOffsetsPerTrigger`` does not apply).
``latestOffset(start, limit)`` is the 4.2+ admission-control signature; pyspark 4.0 and
4.1 call ``latestOffset()`` without the start, and the reader then caps from the end of
the micro-batch it last returned (``latestOffset``) or planned (``partitions``). A
restarted query on those versions plans its last micro-batch again before asking for
the next one, so it is capped too; a new query asks before ``initialOffset``, so its
first micro-batch is not capped (it reads up to the log ends).

A checkpointed offset that retention deleted meanwhile fails the micro-batch, or with
``failOnDataLoss=false`` is skipped with a warning (rill.client.spark.data_loss).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import structlog
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from rill.client.spark.arrow_read import read_range
from rill.client.spark.batch import plan_ranges
from rill.client.spark.data_loss import skip_deleted
from rill.client.spark.options import ReadOptions, SourceOptionError
from rill.client.spark.planning import Cluster, TopicPartition, cluster
from rill.client.spark.ranges import ByteRange
from rill.client.spark.time_offsets import check_time_partitions, start_offset
from rill.client.spark.trigger_limits import capped_by_bytes, capped_by_messages, count_up_to
from rill.client.spark.worker_log import worker_logging

try:  # pyspark 4.2+: Trigger.AvailableNow with admission control
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow as _AvailableNow
except ImportError:  # 4.0, 4.1: Spark never asks
    _AvailableNow = object  # type: ignore[assignment,misc]

__all__ = ["RillStreamReader", "to_json_offsets", "from_json_offsets"]

log = structlog.get_logger(__name__)

Offsets = dict[TopicPartition, int]


def to_json_offsets(offsets: Offsets) -> dict[str, dict[str, int]]:
    result: dict[str, dict[str, int]] = {}
    for (topic, p), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(p)] = offset
    return result


def from_json_offsets(value: Mapping[str, Any] | None) -> Offsets:
    return {TopicPartition(topic, int(p)): int(o) for topic, parts in (value or {}).items() for p, o in parts.items()}


def _caps(opts: ReadOptions, limit: Any) -> tuple[int | None, int | None, int | None]:
    """(messages, bytes, minimum messages) a micro-batch is limited to: the options', or those of a 4.2+
    ReadLimit (ReadMaxRows, ReadMaxBytes, ReadMinRows); none at all for ReadAllAvailable."""
    if limit is None:
        return opts.max_offsets_per_trigger, opts.max_bytes_per_trigger, opts.min_offsets_per_trigger
    if type(limit).__name__ == "ReadAllAvailable":
        return None, None, None
    return (getattr(limit, "max_rows", None) or opts.max_offsets_per_trigger,
            getattr(limit, "max_bytes", None) or opts.max_bytes_per_trigger,
            getattr(limit, "min_rows", None) or opts.min_offsets_per_trigger)


class RillStreamReader(DataSourceStreamReader, _AvailableNow):
    """A stream of the subscribed topics (see the module doc)."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        # Where the next micro-batch starts, as far as the driver process knows; only the
        # argument-less latestOffset() of pyspark 4.0/4.1 needs it.
        self._position: Offsets | None = None
        self._target: Offsets | None = None  # Trigger.AvailableNow: the log ends when the query started
        self._last_batch_s = 0.0  # minOffsetsPerTrigger: when the last micro-batch was triggered (0: never)

    # ---------------------------------------------------------------- driver

    def _latest(self, c: Cluster) -> dict[TopicPartition, tuple[int, int]]:
        return {tp: c.bounds(tp) for tp in c.partitions(self.opts, must_exist=self.opts.pattern is None)}

    def initialOffset(self) -> dict[str, dict[str, int]]:
        with cluster(self.opts.bootstrap, self.opts.security) as c:
            bounds = self._latest(c)
            c.check_named_partitions(self.opts.starting, c.partition_counts, "startingOffsets")
            check_time_partitions(c, self.opts.starting_times)
            start = {tp: start_offset(c, self.opts, tp, b) for tp, b in bounds.items()}
        log.info("spark.stream_initial_offsets", partitions=len(start))
        return to_json_offsets(start)

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows, ReadMinRows

        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.opts.max_bytes_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow (4.2+): read up to the log ends of now, in capped micro-batches."""
        with cluster(self.opts.bootstrap, self.opts.security) as c:
            self._target = {tp: high for tp, (_, high) in self._latest(c).items()}
        log.info("spark.stream_available_now", partitions=len(self._target))

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, dict[str, int]]:
        """The end of the next micro-batch: every log end, or less under the limits (see the module doc)."""
        base = from_json_offsets(start) if start is not None else dict(self._position or {})
        most, budget, least = _caps(self.opts, limit)
        with cluster(self.opts.bootstrap, self.opts.security) as c:
            bounds = self._latest(c)
            current = {tp: max(base.get(tp, low), low) for tp, (low, _) in bounds.items()}
            ends = {tp: high for tp, (_, high) in bounds.items()}
            if self._target is not None:
                ends = {tp: max(current[tp], min(high, self._target.get(tp, current[tp]))) for tp, high in ends.items()}
            known_base = start is not None or self._position is not None  # legacy, a new query: unknown
            if known_base and least is not None and self._target is None and self._held_back(c, current, ends, least):
                ends = dict(current)  # no micro-batch yet
            elif known_base:
                if budget is not None:
                    ends = capped_by_bytes(c, current, ends, budget)
                if most is not None:
                    ends = capped_by_messages(c, current, ends, most, self.opts.fetch_bytes)
        if any(ends[tp] > current[tp] for tp in ends):
            self._last_batch_s = time.monotonic()
        self._position = ends
        return to_json_offsets(ends)

    def _held_back(self, c: Cluster, current: Offsets, ends: Offsets, least: int) -> bool:
        """minOffsetsPerTrigger: whether fewer than ``least`` messages wait and maxTriggerDelay has not passed
        since the last micro-batch (the first one is never held back, as in Spark)."""
        since = time.monotonic() - self._last_batch_s
        if not self._last_batch_s or since >= self.opts.max_trigger_delay_ms / 1000:
            return False
        waiting = count_up_to(c, current, ends, least, self.opts.fetch_bytes)
        if waiting < least:
            log.debug("spark.stream_waiting_for_messages", messages=waiting, minimum=least, waited_s=round(since, 3))
        return waiting < least

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin, finish = from_json_offsets(start), from_json_offsets(end)
        self._position = dict(finish)  # the next micro-batch starts here (4.0/4.1 after a restart: see above)
        with cluster(self.opts.bootstrap, self.opts.security) as c:
            c.refresh(tuple(sorted({t for t, _ in finish})), None, must_exist=False)
            offsets = {}
            for tp, stop in finish.items():
                low = c.bounds(tp)[0]
                first = begin[tp] if tp in begin else low  # a new partition: from its log start
                first = skip_deleted(tp, first, min(low, stop), fail=self.opts.fail_on_data_loss)
                if stop > first:
                    offsets[tp] = (first, stop)
            return list(plan_ranges(c, offsets, self.opts.split_bytes,
                                    max_records=self.opts.max_records_per_partition))

    def commit(self, end: dict[str, Any]) -> None:
        log.debug("spark.stream_commit", offsets=end)

    # ---------------------------------------------------------------- executors

    def read(self, partition: InputPartition) -> Iterator[Any]:
        worker_logging()
        if not isinstance(partition, ByteRange):
            raise SourceOptionError(f"unexpected partition {partition!r} for the rill stream reader")
        yield from read_range(partition, self.opts.fetch_bytes, self.opts.bootstrap, security=self.opts.security,
                              fail_on_data_loss=self.opts.fail_on_data_loss)
