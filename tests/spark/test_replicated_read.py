"""The rill source on a replicated topic (factor 3 on three brokers on a real ZooKeeper).

It reads each partition from its leader, only what the leader has committed (up to the
high watermark that OFFSETS "latest" gave at planning time), and follows leadership when
the leader stops between planning and reading, or between two micro-batches, with every
acknowledged message read exactly once. Executor code (``read``) runs in this process
where a test must stop a broker at an exact point; the rest runs in Spark.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from rill.broker.testing import RunningBroker
from rill.client.simple import SimpleProducer
from rill.client.spark.batch import RillBatchReader
from rill.client.spark.options import parse_read_options
from rill.client.spark.ranges import ByteRange
from rill.client.spark.stream import RillStreamReader
from tests.spark.helpers import rows_of
from tests.zookeeper.replicated_support import (Brokers, create_replicated, hold_high_watermark, latest, leader_of,
                                                log_end, move_leadership, produce_acked, replicated_cluster,
                                                stop_broker)

TOPIC = "orders"
Row = tuple[int, int, bytes]


@pytest.fixture
def brokers(tmp_path: Path, zk_connect: str) -> Iterator[Brokers]:
    with replicated_cluster(tmp_path, zk_connect) as cluster:
        yield cluster


def bootstrap(brokers: Brokers, first: RunningBroker) -> str:
    """Every broker's address, ``first`` first (the one a test stops: planning must not depend on it)."""
    return ",".join([first.address] + [b.address for b in brokers.values() if b is not first])


def produce_rows(brokers: Brokers, partitions: int, per_partition: int, tag: str) -> list[Row]:
    rows = []
    for p in range(partitions):
        acked = produce_acked(brokers, TOPIC, p, [f"{tag}-{p}-{i}".encode() for i in range(per_partition)])
        rows.extend((p, offset, value) for offset, value in acked)
    return rows


def read_in_process(reader: RillBatchReader | RillStreamReader, ranges: list[Any]) -> list[Row]:
    """What the executors would return for ``ranges``, read here (Arrow batches to rows)."""
    rows = []
    for r in ranges:
        for batch in reader.read(r):
            columns = batch.to_pydict()
            rows.extend(zip(columns["partition"], columns["offset"], columns["value"]))
    return sorted(rows)


def test_batch_read_returns_the_acknowledged_messages_from_the_leaders(spark: Any, brokers: Brokers,
                                                                       zk: KazooClient) -> None:
    """Each task reads its partition from the partition's leader, and the rows are exactly the acknowledged ones."""
    create_replicated(zk, brokers, TOPIC, 3)
    expected = produce_rows(brokers, 3, 40, "a")
    address = bootstrap(brokers, brokers[2])
    planned = RillBatchReader(parse_read_options({"bootstrap": address, "subscribe": TOPIC}, streaming=False))
    leaders = {p: leader_of(brokers, TOPIC, p) for p in range(3)}
    assert sorted((r.partition, r.port) for r in planned.partitions() if isinstance(r, ByteRange)) == [
        (p, b.port) for p, b in sorted(leaders.items()) if b is not None]
    df = spark.read.format("rill").option("bootstrap", address).option("subscribe", TOPIC).load()
    assert rows_of(df) == sorted(expected)


def test_batch_read_stops_at_the_high_watermark(spark: Any, tmp_path: Path, zk_connect: str,
                                                zk: KazooClient) -> None:
    """Messages the leader holds but its followers have not fetched are not read: the rows end where OFFSETS
    latest (the high watermark) said at planning time, though the leader's log goes further."""
    with replicated_cluster(tmp_path, zk_connect, replica_lag_time_max_ms=60_000) as brokers:
        create_replicated(zk, brokers, TOPIC, 1)
        committed = produce_rows(brokers, 1, 20, "committed")
        leader = hold_high_watermark(brokers, TOPIC, 0)
        with SimpleProducer(leader.host, leader.port) as producer:  # acks=append: on the leader alone
            producer.send(TOPIC, [f"uncommitted-{i}".encode() for i in range(10)], 0)
        high_watermark = latest(leader, TOPIC, 0)
        assert log_end(leader, TOPIC, 0) > high_watermark
        options = {"bootstrap": leader.address, "subscribe": TOPIC}
        reader = RillBatchReader(parse_read_options(options, streaming=False))
        ranges = reader.partitions()
        assert [(r.start, r.end) for r in ranges if isinstance(r, ByteRange)] == [(0, high_watermark)]
        assert read_in_process(reader, ranges) == sorted(committed)
        df = spark.read.format("rill").options(**options).load()
        assert rows_of(df) == sorted(committed)
        assert max(offset for _, offset, _ in committed) < high_watermark


# How leadership leaves the broker: moved while it keeps serving as a follower (reads there are
# NotLeaderForPartition), a controlled shutdown (it hands over, then stops), or a stop without
# handing over (its connections are refused until the controller elects a new leader).
CHANGES = ["moved", "controlled-shutdown", "stopped-without-handover"]


def change_leader(brokers: Brokers, leader: RunningBroker, how: str, partitions: int) -> Brokers:
    """Make ``leader`` lead nothing of TOPIC as ``how`` says; the brokers still running."""
    if how == "moved":
        move_leadership(brokers, leader, TOPIC, partitions)
        return brokers
    return stop_broker(brokers, leader, TOPIC, partitions)


@pytest.mark.parametrize("how", CHANGES)
def test_batch_read_follows_a_leader_change_between_planning_and_reading(tmp_path: Path, zk_connect: str,
                                                                         zk: KazooClient, how: str) -> None:
    """Ranges planned on a leader that loses leadership before the tasks run are read from the new leader,
    each row once."""
    handover = how != "stopped-without-handover"
    with replicated_cluster(tmp_path, zk_connect, controlled_shutdown_enable=handover) as brokers:
        create_replicated(zk, brokers, TOPIC, 2)
        expected = produce_rows(brokers, 2, 50, "a")
        leader = leader_of(brokers, TOPIC, 0)
        assert leader is not None
        reader = RillBatchReader(parse_read_options({"bootstrap": bootstrap(brokers, leader), "subscribe": TOPIC},
                                                    streaming=False))
        ranges = reader.partitions()
        assert any(isinstance(r, ByteRange) and r.port == leader.port for r in ranges)
        change_leader(brokers, leader, how, 2)
        assert read_in_process(reader, ranges) == sorted(expected)


def test_planning_follows_a_leader_that_moved(spark: Any, brokers: Brokers, zk: KazooClient) -> None:
    """A query planned after the leader (also the first bootstrap broker) stopped reads everything from the new one."""
    create_replicated(zk, brokers, TOPIC, 2)
    expected = produce_rows(brokers, 2, 30, "a")
    leader = leader_of(brokers, TOPIC, 0)
    assert leader is not None
    address = bootstrap(brokers, leader)
    remaining = stop_broker(brokers, leader, TOPIC, 2)
    expected += produce_rows(remaining, 2, 5, "b")
    df = spark.read.format("rill").option("bootstrap", address).option("subscribe", TOPIC).load()
    assert rows_of(df) == sorted(expected)


@pytest.mark.parametrize("how", ["moved", "controlled-shutdown"])
def test_stream_reader_follows_a_leader_change_between_micro_batches(brokers: Brokers, zk: KazooClient,
                                                                     how: str) -> None:
    """Micro-batches planned and read before and after the leader changes cover every acknowledged message once."""
    create_replicated(zk, brokers, TOPIC, 2)
    first = produce_rows(brokers, 2, 30, "first")
    leader = leader_of(brokers, TOPIC, 0)
    assert leader is not None
    reader = RillStreamReader(parse_read_options({"bootstrap": bootstrap(brokers, leader), "subscribe": TOPIC,
                                                  "startingOffsets": "earliest"}, streaming=True))
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    got = read_in_process(reader, reader.partitions(start, end))
    assert got == sorted(first)
    remaining = change_leader(brokers, leader, how, 2)
    second = produce_rows(remaining, 2, 20, "second")
    start, end = end, reader.latestOffset(end, None)
    assert read_in_process(reader, reader.partitions(start, end)) == sorted(second)


@pytest.mark.slow
def test_streaming_query_survives_the_leader_stopping(spark: Any, brokers: Brokers, zk: KazooClient,
                                                      tmp_path: Path) -> None:
    """A running streaming query keeps going across a leader change: its sink holds every acknowledged row once."""
    create_replicated(zk, brokers, TOPIC, 2)
    expected = produce_rows(brokers, 2, 30, "first")
    leader = leader_of(brokers, TOPIC, 0)
    assert leader is not None
    query = (spark.readStream.format("rill").option("bootstrap", bootstrap(brokers, leader))
             .option("subscribe", TOPIC).option("startingOffsets", "earliest").load()
             .writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        query.processAllAvailable()
        remaining = stop_broker(brokers, leader, TOPIC, 2)
        expected += produce_rows(remaining, 2, 20, "second")
        query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert rows_of(spark.read.parquet(str(tmp_path / "out"))) == sorted(expected)
