"""Streaming reads with real Spark: checkpointed byte offsets, restarts, triggers, new partitions."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rill.broker.testing import RunningBroker
from rill.client.spark.options import parse_read_options
from rill.client.spark.stream import RillStreamReader
from tests.spark.helpers import create, produce, rows_of, topic_rows

pytestmark = pytest.mark.slow


def start_query(spark: Any, broker: RunningBroker, out: Path, **options: str) -> Any:
    reader = spark.readStream.format("rill").option("bootstrap", broker.address).option("startingOffsets", "earliest")
    return (reader.options(**options).load().writeStream.format("parquet").option("path", str(out / "data"))
            .option("checkpointLocation", str(out / "checkpoint")).start())


def run_until_caught_up(spark: Any, broker: RunningBroker, out: Path, **options: str) -> list[int]:
    """Start (or resume) the query, let it read everything there is, stop it; the rows per micro-batch."""
    query = start_query(spark, broker, out, **options)
    try:
        query.processAllAvailable()
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()


def limits_passed() -> bool:
    """Whether this pyspark calls latestOffset(start, limit) (4.2+, which added the ReadLimit types)."""
    return importlib.util.find_spec("pyspark.sql.streaming.datasource") is not None


def test_restart_from_checkpoint_no_duplicates_no_gaps(spark: Any, broker: RunningBroker, tmp_path: Path) -> None:
    """A query stopped and restarted on its checkpoint continues where it stopped: every message once."""
    create(broker, "clicks", 2)
    for p in range(2):
        produce(broker, "clicks", p, [f"first-{p}-{i}".encode() for i in range(150)])
    batches = run_until_caught_up(spark, broker, tmp_path, subscribe="clicks", maxOffsetsPerTrigger="2000")
    assert sum(batches) == 300
    # The byte budget splits the backlog into micro-batches; pyspark 4.0/4.1 do not cap a new query's first one.
    assert len(batches) >= (3 if limits_passed() else 1)
    for p in range(2):
        produce(broker, "clicks", p, [f"second-{p}-{i}".encode() for i in range(70)])
    again = run_until_caught_up(spark, broker, tmp_path, subscribe="clicks", maxOffsetsPerTrigger="1000")
    assert sum(again) == 140 and len(again) >= 3  # a restarted query is capped on every version
    assert rows_of(spark.read.parquet(str(tmp_path / "data"))) == sorted(topic_rows(broker, "clicks", 2))


def test_new_topic_matching_pattern_is_read_from_its_start(spark: Any, broker: RunningBroker,
                                                           tmp_path: Path) -> None:
    """A topic created while a subscribePattern query runs is picked up and read from its first message."""
    create(broker, "logs-a", 1)
    produce(broker, "logs-a", 0, [b"a1", b"a2"])
    query = start_query(spark, broker, tmp_path, subscribePattern="logs-.*")
    try:
        query.processAllAvailable()
        create(broker, "logs-b", 2)
        produce(broker, "logs-b", 1, [b"b1", b"b2", b"b3"])
        query.processAllAvailable()
    finally:
        query.stop()
    got = spark.read.parquet(str(tmp_path / "data")).select("topic", "value").collect()
    assert sorted((r.topic, bytes(r.value)) for r in got) == [
        ("logs-a", b"a1"), ("logs-a", b"a2"), ("logs-b", b"b1"), ("logs-b", b"b2"), ("logs-b", b"b3")]


def read_max_rows(n: int) -> Any:
    """pyspark's ReadMaxRows(n); a stand-in on 4.0/4.1, which have no ReadLimit types (and never pass one)."""
    try:
        from pyspark.sql.streaming.datasource import ReadMaxRows
    except ImportError:
        return SimpleNamespace(max_rows=n)
    return ReadMaxRows(n)


def capped_reader(broker: RunningBroker) -> RillStreamReader:
    """A stream reader of topic "sig" (50 messages of 100 bytes on the log), 1050 bytes per micro-batch."""
    create(broker, "sig", 1)
    produce(broker, "sig", 0, [b"x" * 90] * 50)  # 100 bytes per message on the log
    return new_reader(broker)


def new_reader(broker: RunningBroker) -> RillStreamReader:
    return RillStreamReader(parse_read_options(
        {"bootstrap": broker.address, "subscribe": "sig", "startingOffsets": "earliest",
         "maxOffsetsPerTrigger": "1050"}, streaming=True))


def test_latest_offset_both_signatures(broker: RunningBroker) -> None:
    """latestOffset() (pyspark 4.0/4.1) and latestOffset(start, limit) (4.2+) both cap at message boundaries."""
    reader = capped_reader(broker)
    start = reader.initialOffset()
    assert start == {"sig": {"0": 0}}
    assert reader.latestOffset(start, read_max_rows(1050)) == {"sig": {"0": 1000}}
    assert reader.latestOffset() == {"sig": {"0": 2000}}  # legacy: from the offsets it returned last
    assert reader.latestOffset({"sig": {"0": 4900}}, read_max_rows(10)) == {"sig": {"0": 5000}}  # one message at least
    partitions = reader.partitions({"sig": {"0": 1000}}, {"sig": {"0": 2000}})
    assert [(r.start, r.end) for r in partitions] == [(1000, 2000)]
    assert reader.partitions(start, start) == []


def test_legacy_latest_offset_caps_from_what_the_driver_saw(broker: RunningBroker) -> None:
    """pyspark 4.0/4.1 call latestOffset() without the start, in this order (observed on 4.0.5 and 4.1.4):
    a new query asks before initialOffset (not capped: the start is unknown); a restarted one plans its
    last micro-batch again first (partitions), and is capped from that micro-batch's end."""
    new_query = capped_reader(broker)
    assert new_query.latestOffset() == {"sig": {"0": 5000}}  # nothing known yet: up to the log end
    assert new_query.initialOffset() == {"sig": {"0": 0}}
    assert len(new_query.partitions({"sig": {"0": 0}}, {"sig": {"0": 5000}})) == 1
    restarted = new_reader(broker)  # its last micro-batch was committed
    assert restarted.partitions({"sig": {"0": 1000}}, {"sig": {"0": 1000}}) == []
    assert restarted.latestOffset() == {"sig": {"0": 2000}}
    replaying = new_reader(broker)  # its last micro-batch was not committed: Spark runs it again
    assert [(r.start, r.end) for r in replaying.partitions({"sig": {"0": 1000}}, {"sig": {"0": 2000}})] == [
        (1000, 2000)]
    assert replaying.latestOffset() == {"sig": {"0": 3000}}


def test_stream_rejects_batch_only_option(broker: RunningBroker) -> None:
    """endingOffsets makes no sense for a stream and is refused up front."""
    from rill.client.spark import SourceOptionError

    with pytest.raises(SourceOptionError, match="batch reads only"):
        parse_read_options({"bootstrap": broker.address, "subscribe": "x",
                            "endingOffsets": json.dumps({"x": {"0": 1}})}, streaming=True)
