"""The streaming reader: per-partition byte offsets in Spark's checkpoint.

An offset of this source is ``{"topic": {"partition": byte_offset}}`` (partition keys
are strings: offsets travel as JSON). Spark writes the end offset of each micro-batch to
its checkpoint before running it, so a restarted query re-reads exactly the ranges it
had not committed: exactly-once into an idempotent or transactional sink.

``initialOffset``, ``latestOffset``, ``partitions`` and ``commit`` run in one long-lived
Python process on the driver; ``read`` runs in executors on a pickled copy (the reader
holds no connection, so it pickles). Partitions that appear after the query started
(a new topic matching ``subscribePattern``) are read from their log start.

``maxOffsetsPerTrigger`` is a byte budget per micro-batch (offsets are byte positions),
shared across partitions in proportion to their backlog and cut at message
boundaries; every partition with a backlog advances by at least one message.
``latestOffset(start, limit)`` is the 4.2+ admission-control signature; pyspark 4.0 and
4.1 call ``latestOffset()`` without the start, and the reader then caps from the end of
the micro-batch it last returned (``latestOffset``) or planned (``partitions``). A
restarted query on those versions plans its last micro-batch again before asking for
the next one, so it is capped too; a new query asks before ``initialOffset``, so its
first micro-batch is not capped (it reads up to the log ends).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import structlog
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from rill.client.spark.arrow_read import read_range
from rill.client.spark.batch import plan_ranges
from rill.client.spark.options import ReadOptions, SourceOptionError
from rill.client.spark.planning import Cluster, TopicPartition, cluster
from rill.client.spark.ranges import ByteRange
from rill.client.spark.worker_log import worker_logging

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


def _limit_bytes(limit: Any) -> int | None:
    """The byte budget of a 4.2+ ReadLimit (ReadMaxRows / ReadMaxBytes), None for ReadAllAvailable."""
    for name in ("max_rows", "max_bytes"):
        value = getattr(limit, name, None)
        if value is not None:
            return int(value)
    return None


class RillStreamReader(DataSourceStreamReader):
    """A stream of the subscribed topics (see the module doc)."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        # Where the next micro-batch starts, as far as the driver process knows; only the
        # argument-less latestOffset() of pyspark 4.0/4.1 needs it.
        self._position: Offsets | None = None

    # ---------------------------------------------------------------- driver

    def _latest(self, c: Cluster) -> dict[TopicPartition, tuple[int, int]]:
        return {tp: c.bounds(tp) for tp in c.partitions(self.opts, must_exist=self.opts.pattern is None)}

    def initialOffset(self) -> dict[str, dict[str, int]]:
        with cluster(self.opts.bootstrap, self.opts.security) as c:
            bounds = self._latest(c)
            c.check_named_partitions(self.opts.starting, c.partition_counts, "startingOffsets")
            if self.opts.starting_timestamp is not None:
                start = {tp: c.offset_at_time(tp, self.opts.starting_timestamp) for tp in bounds}
            else:
                start = {tp: c.resolve(self.opts.starting, tp, "startingOffsets", b) for tp, b in bounds.items()}
        log.info("spark.stream_initial_offsets", partitions=len(start))
        return to_json_offsets(start)

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        cap = self.opts.max_offsets_per_trigger
        return ReadMaxRows(cap) if cap is not None else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, dict[str, int]]:
        """The end of the next micro-batch: every log end, or less under the byte budget."""
        base = from_json_offsets(start) if start is not None else dict(self._position or {})
        budget = _limit_bytes(limit) if limit is not None else self.opts.max_offsets_per_trigger
        with cluster(self.opts.bootstrap, self.opts.security) as c:
            bounds = self._latest(c)
            current = {tp: max(base.get(tp, low), low) for tp, (low, _) in bounds.items()}
            ends = {tp: high for tp, (_, high) in bounds.items()}
            known_base = start is not None or self._position is not None  # legacy, a new query: unknown
            if budget is not None and known_base:
                ends = _capped(c, current, ends, budget)
        self._position = ends
        return to_json_offsets(ends)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin, finish = from_json_offsets(start), from_json_offsets(end)
        self._position = dict(finish)  # the next micro-batch starts here (4.0/4.1 after a restart: see above)
        with cluster(self.opts.bootstrap, self.opts.security) as c:
            c.refresh(tuple(sorted({t for t, _ in finish})), None, must_exist=False)
            offsets = {}
            for tp, stop in finish.items():
                first = begin[tp] if tp in begin else c.bounds(tp)[0]  # a new partition: from its log start
                if stop > first:
                    offsets[tp] = (first, stop)
            return list(plan_ranges(c, offsets, self.opts.split_bytes))

    def commit(self, end: dict[str, Any]) -> None:
        log.debug("spark.stream_commit", offsets=end)

    # ---------------------------------------------------------------- executors

    def read(self, partition: InputPartition) -> Iterator[Any]:
        worker_logging()
        if not isinstance(partition, ByteRange):
            raise SourceOptionError(f"unexpected partition {partition!r} for the rill stream reader")
        yield from read_range(partition, self.opts.fetch_bytes, self.opts.bootstrap, security=self.opts.security)


def _capped(c: Cluster, current: Offsets, ends: Offsets, budget: int) -> Offsets:
    """``ends`` cut so that the bytes read total about ``budget``, split by backlog, at message
    boundaries; each partition with a backlog advances by one message at least."""
    backlog = {tp: ends[tp] - current[tp] for tp in ends if ends[tp] > current[tp]}
    total = sum(backlog.values())
    if total <= budget:
        return ends
    result = dict(ends)
    for tp, size in backlog.items():
        allowed = current[tp] + max(1, budget * size // total)
        inside = [b for b in c.boundaries_near(tp, [allowed]) if current[tp] < b <= allowed]
        result[tp] = inside[-1] if inside else _one_fetch_end(c, tp, current[tp], allowed - current[tp])
    return result


def _one_fetch_end(c: Cluster, tp: TopicPartition, offset: int, size: int) -> int:
    """The end of the messages one fetch of ``size`` bytes at ``offset`` returns (one message at least)."""
    messages = c.reads.fetch(tp[0], tp[1], offset, max(size, 1))
    return messages[-1].next_offset if messages else offset
