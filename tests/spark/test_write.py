"""Writes with real Spark: a DataFrame and a stream produced to topics, then read back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rill.broker.testing import RunningBroker
from tests.spark.helpers import create, produce, read, topic_rows

pytestmark = pytest.mark.slow


def test_write_then_read_back(spark: Any, broker: RunningBroker) -> None:
    """df.write.format("rill") appends every value once; a partition column places rows; reading gives them back."""
    create(broker, "out", 2)
    df = spark.createDataFrame([(f"v{i}", i % 2) for i in range(1000)], "value string, partition int")
    df.write.format("rill").option("bootstrap", broker.address).option("topic", "out").mode("append").save()
    back = read(spark, broker, subscribe="out").select("partition", "value").collect()
    assert sorted((r.partition, bytes(r.value)) for r in back) == sorted((i % 2, f"v{i}".encode()) for i in range(1000))


def test_write_topic_column(spark: Any, broker: RunningBroker) -> None:
    """Without the topic option, a topic column routes each row."""
    create(broker, "left", 1)
    create(broker, "right", 1)
    df = spark.createDataFrame([("left", b"l1"), ("right", b"r1"), ("left", b"l2")], "topic string, value binary")
    df.write.format("rill").option("bootstrap", broker.address).mode("append").save()
    assert sorted(v for _, _, v in topic_rows(broker, "left", 1)) == [b"l1", b"l2"]  # two tasks: any order
    assert [v for _, _, v in topic_rows(broker, "right", 1)] == [b"r1"]


def test_write_stream_copies_a_topic(spark: Any, broker: RunningBroker, tmp_path: Path) -> None:
    """writeStream produces each micro-batch: a stream from one topic into another copies every value."""
    create(broker, "src", 2)
    create(broker, "dst", 1)
    for p in range(2):
        produce(broker, "src", p, [f"s{p}-{i}".encode() for i in range(100)])
    query = (spark.readStream.format("rill").option("bootstrap", broker.address).option("subscribe", "src")
             .option("startingOffsets", "earliest").load().select("value")
             .writeStream.format("rill").option("bootstrap", broker.address).option("topic", "dst")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert sorted(v for _, _, v in topic_rows(broker, "dst", 1)) == sorted(v for _, _, v in topic_rows(broker, "src", 2))


@pytest.mark.parametrize("columns, options, message", [
    ("partition int", {"topic": "out"}, "needs a 'value' column"),
    ("value string", {}, "needs the option 'topic' or a 'topic' column"),
    ("value string", {"topic": "nowhere"}, "topic 'nowhere' does not exist"),
])
def test_bad_writes_fail_before_sending(spark: Any, broker: RunningBroker, columns: str,
                                        options: dict[str, str], message: str) -> None:
    """A DataFrame the writer cannot send, or an unknown topic, fails before any message is produced."""
    create(broker, "out", 1)
    df = spark.createDataFrame([], columns)
    with pytest.raises(Exception, match=message.replace("(", r"\(").replace(")", r"\)")):
        df.write.format("rill").option("bootstrap", broker.address).options(**options).mode("append").save()
    assert topic_rows(broker, "out", 1) == []
