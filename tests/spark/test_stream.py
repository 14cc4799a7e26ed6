"""Streaming reads with real Spark: checkpointed byte offsets, restarts, triggers, new partitions."""

from __future__ import annotations

import json
from pathlib import Path
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


def test_restart_from_checkpoint_no_duplicates_no_gaps(spark: Any, broker: RunningBroker, tmp_path: Path) -> None:
    """A query stopped and restarted on its checkpoint continues where it stopped: every message once."""
    create(broker, "clicks", 2)
    for p in range(2):
        produce(broker, "clicks", p, [f"first-{p}-{i}".encode() for i in range(150)])
    batches = run_until_caught_up(spark, broker, tmp_path, subscribe="clicks", maxOffsetsPerTrigger="2000")
    assert len(batches) >= 3 and sum(batches) == 300  # the byte budget split the backlog into micro-batches
    for p in range(2):
        produce(broker, "clicks", p, [f"second-{p}-{i}".encode() for i in range(70)])
    assert sum(run_until_caught_up(spark, broker, tmp_path, subscribe="clicks")) == 140
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


def test_latest_offset_both_signatures(broker: RunningBroker) -> None:
    """latestOffset() (pyspark 4.0/4.1) and latestOffset(start, limit) (4.2+) both cap at message boundaries."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    create(broker, "sig", 1)
    produce(broker, "sig", 0, [b"x" * 90] * 50)  # 100 bytes per message on the log
    reader = RillStreamReader(parse_read_options(
        {"bootstrap": broker.address, "subscribe": "sig", "startingOffsets": "earliest",
         "maxOffsetsPerTrigger": "1050"}, streaming=True))
    start = reader.initialOffset()
    assert start == {"sig": {"0": 0}}
    assert reader.latestOffset(start, ReadMaxRows(1050)) == {"sig": {"0": 1000}}
    assert reader.latestOffset() == {"sig": {"0": 2000}}  # legacy: from the offsets it returned last
    assert reader.latestOffset({"sig": {"0": 4900}}, ReadMaxRows(10)) == {"sig": {"0": 5000}}  # one message at least
    partitions = reader.partitions({"sig": {"0": 1000}}, {"sig": {"0": 2000}})
    assert [(r.start, r.end) for r in partitions] == [(1000, 2000)]
    assert reader.partitions(start, start) == []


def test_stream_rejects_batch_only_option(broker: RunningBroker) -> None:
    """endingOffsets makes no sense for a stream and is refused up front."""
    from rill.client.spark import SourceOptionError

    with pytest.raises(SourceOptionError, match="batch reads only"):
        parse_read_options({"bootstrap": broker.address, "subscribe": "x",
                            "endingOffsets": json.dumps({"x": {"0": 1}})}, streaming=True)
