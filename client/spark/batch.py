"""The batch reader: plans byte ranges on the driver, reads them on executors.

``partitions()`` runs once, at planning time, in a Python process on the driver: it
resolves the subscription and the offsets (any bad option fails the query there, with
a :class:`~rill.client.spark.options.SourceOptionError`) and returns one
:class:`~rill.client.spark.ranges.ByteRange` per partition, or several for a partition
bigger than ``splitBytes`` (or to reach ``minPartitions``, or holding more than about
``maxRecordsPerPartition`` messages: the size of a message is sampled with one fetch at
the range's start, rill.client.spark.trigger_limits.bytes_per_message). ``read()`` runs once per
range in an executor and yields Arrow record batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import structlog
from pyspark.sql.datasource import DataSourceReader, InputPartition

from rill.client.spark.arrow_read import read_range
from rill.client.spark.data_loss import skip_deleted
from rill.client.spark.options import ReadOptions, SourceOptionError
from rill.client.spark.planning import Cluster, TopicPartition, cluster
from rill.client.spark.ranges import ByteRange, pieces_for, split
from rill.client.spark.time_offsets import check_time_partitions, end_offset, start_offset
from rill.client.spark.trigger_limits import bytes_per_message
from rill.client.spark.worker_log import worker_logging

__all__ = ["RillBatchReader", "plan_ranges", "resolve_batch_offsets"]

log = structlog.get_logger(__name__)


def resolve_batch_offsets(c: Cluster, opts: ReadOptions) -> dict[TopicPartition, tuple[int, int]]:
    """(start, end) of every subscribed partition, from the options, checked against the logs.

    Raises:
        SourceOptionError: unknown topics or partitions, offsets outside the log or not on a
            message boundary, or a start after its end.
    """
    covered = c.partitions(opts)
    c.check_named_partitions(opts.starting, c.partition_counts, "startingOffsets")
    c.check_named_partitions(opts.ending, c.partition_counts, "endingOffsets")
    check_time_partitions(c, opts.starting_times)
    check_time_partitions(c, opts.ending_times)
    result: dict[TopicPartition, tuple[int, int]] = {}
    for tp in covered:
        bounds = c.bounds(tp)
        wanted = opts.starting.offset_for(*tp)
        if opts.starting_times is None and 0 <= wanted < bounds[0]:  # deleted: fail, or skip with a warning
            start = skip_deleted(tp, wanted, bounds[0], fail=opts.fail_on_data_loss)
        else:
            start = start_offset(c, opts, tp, bounds)
        end = end_offset(c, opts, tp, bounds)
        if start > end:
            raise SourceOptionError(f"{tp[0]}-{tp[1]}: the starting offset {start} is after the ending offset {end}")
        result[tp] = (start, end)
    return result


def plan_ranges(c: Cluster, offsets: dict[TopicPartition, tuple[int, int]], split_bytes: int,
                min_partitions: int = 1, max_records: int | None = None) -> list[ByteRange]:
    """The ranges to read: one per non-empty partition, big ones split at message boundaries (into
    pieces of about ``split_bytes``, or of about ``max_records`` messages when that makes more)."""
    total = sum(end - start for start, end in offsets.values())
    ranges: list[ByteRange] = []
    for tp, (start, end) in offsets.items():
        if end <= start:
            continue
        leader = c.leader(tp)  # bounds() reached it just now; an executor follows it if it moves
        whole = (ByteRange(tp[0], tp[1], start, end, leader.host, leader.port, leader.partition) if leader is not None
                 else ByteRange(tp[0], tp[1], start, end, "", 0, -1))
        pieces = max(pieces_for(whole.size, split_bytes), -(-min_partitions * whole.size // max(total, 1)))
        if max_records is not None and whole.size > max_records * 10:  # 10 bytes: the smallest message
            pieces = max(pieces, pieces_for(whole.size, max(1, int(max_records * bytes_per_message(c, tp, start, end)))))
        if pieces > 1:
            targets = [start + whole.size * k // pieces for k in range(1, pieces)]
            ranges.extend(split(whole, pieces, c.boundaries_near(tp, targets)))
        else:
            ranges.append(whole)
    return ranges


class RillBatchReader(DataSourceReader):
    """A batch read of the subscribed topics between the starting and ending offsets."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[InputPartition]:
        with cluster(self.opts.bootstrap, self.opts.security) as c:
            offsets = resolve_batch_offsets(c, self.opts)
            ranges = plan_ranges(c, offsets, self.opts.split_bytes, self.opts.min_partitions,
                                 self.opts.max_records_per_partition)
        log.info("spark.batch_planned", partitions=len(offsets), tasks=len(ranges),
                 bytes=sum(r.size for r in ranges))
        return list(ranges)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        worker_logging()
        if isinstance(partition, ByteRange):
            yield from read_range(partition, self.opts.fetch_bytes, self.opts.bootstrap,
                                  security=self.opts.security, fail_on_data_loss=self.opts.fail_on_data_loss)
