"""Batch reads with real Spark: schema, every offset option, byte-range splitting, bad options."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from rill.broker.testing import RunningBroker, running_broker
from rill.client.protocol.messages import CODEC_GZIP
from rill.client.simple import SimpleProducer
from tests.spark.helpers import create, produce, read, rows_of, topic_rows

pytestmark = pytest.mark.slow


def values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i:05d}".encode() * (1 + i % 3) for i in range(n)]


@pytest.fixture
def two_partitions(broker: RunningBroker) -> RunningBroker:
    create(broker, "events", 2)
    produce(broker, "events", 0, values("a", 300))
    produce(broker, "events", 1, values("b", 200))
    return broker


def test_schema_is_spark_kafka_columns(spark: Any, two_partitions: RunningBroker) -> None:
    """The schema is Spark's Kafka source's, then offsetIndex (key is null: the 0.7 format has none; timestamps
    are append times; an uncompressed message's offsetIndex is 0)."""
    df = read(spark, two_partitions, subscribe="events")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"), ("offset", "bigint"),
        ("timestamp", "timestamp"), ("timestampType", "int"), ("offsetIndex", "int")]
    first = df.where("partition = 0").orderBy("offset").first()
    assert (first.key, first.topic, first.offset, first.timestampType, first.offsetIndex) == (None, "events", 0, 1, 0)
    assert first.timestamp is not None
    assert {r.offsetIndex for r in df.select("offsetIndex").distinct().collect()} == {0}


def test_gzip_rows_keep_the_documented_key(spark: Any, fine_broker: RunningBroker) -> None:
    """1,000 gzip-produced messages share 10 offsets, yet the upsert key (topic, partition, offset, offsetIndex)
    keeps all 1,000, in wrapper order, and re-reading with other ranges and fetch sizes gives the same keys."""
    create(fine_broker, "zipped", 1)
    sent = [[f"m{b}-{i:03d}".encode() for i in range(100)] for b in range(10)]
    with SimpleProducer(fine_broker.host, fine_broker.port, codec=CODEC_GZIP) as producer:
        for batch in sent:
            producer.send("zipped", batch, partition=0)
    key = ["topic", "partition", "offset", "offsetIndex"]
    first = read(spark, fine_broker, subscribe="zipped")
    again = read(spark, fine_broker, subscribe="zipped", splitBytes="600", fetchBytes="1")
    assert again.rdd.getNumPartitions() > 1
    kept = first.unionByName(again).dropDuplicates(key)  # docs/spark.md's recipe over a replayed read
    assert sorted(bytes(r.value) for r in kept.select("value").collect()) == sorted(sum(sent, []))
    assert first.dropDuplicates(["topic", "partition", "offset"]).count() == 10  # Kafka's key would keep 10

    def keyed(df: Any) -> list[tuple[int, int, bytes]]:
        rows = df.select("offset", "offsetIndex", "value").collect()
        return sorted((r.offset, r.offsetIndex, bytes(r.value)) for r in rows)

    assert keyed(first) == keyed(again)
    assert [v for _, _, v in keyed(first)] == sum(sent, [])  # offsetIndex follows the order inside each wrapper


def test_timestamps_are_append_times_to_the_index_interval(spark: Any, tmp_path: Path) -> None:
    """Each row's timestamp is at most its append time and less than log.index.interval.ms before it."""
    with running_broker(tmp_path / "data", log_index_interval_ms=100) as b:
        create(b, "timed", 1)
        bursts = []
        for k in range(4):
            before = time.time() * 1000
            first, end = produce(b, "timed", 0, values(f"burst{k}", 50))
            bursts.append((first, end, before, time.time() * 1000))
            time.sleep(0.25)
        rows = read(spark, b, subscribe="timed", splitBytes="1024").selectExpr(
            "offset", "unix_micros(timestamp) AS us", "timestampType").orderBy("offset").collect()
    assert len(rows) == 200 and {r.timestampType for r in rows} == {1}
    stamps = [r.us for r in rows]
    assert stamps == sorted(stamps)
    for first, end, before, after in bursts:
        for r in rows:
            if first <= r.offset < end:
                assert before - 100 - 1 < r.us / 1000 <= after + 1, (r.offset, before, after, r.us)


def test_default_reads_earliest_to_latest_once(spark: Any, two_partitions: RunningBroker) -> None:
    """With no offset options a batch reads every message exactly once, one task per partition."""
    df = read(spark, two_partitions, subscribe="events")
    assert df.rdd.getNumPartitions() == 2
    assert rows_of(df) == sorted(topic_rows(two_partitions, "events", 2))


def test_json_offsets_start_and_end(spark: Any, two_partitions: RunningBroker) -> None:
    """JSON offsets: a byte offset, -2 (earliest) and -1 (latest) select exactly those ranges."""
    everything = sorted(topic_rows(two_partitions, "events", 2))
    p0 = [r for r in everything if r[0] == 0]
    start, end = p0[100][1], p0[200][1]
    df = read(spark, two_partitions, subscribe="events",
              startingOffsets=json.dumps({"events": {"0": start, "1": -2}}),
              endingOffsets=json.dumps({"events": {"0": end, "1": -1}}))
    assert rows_of(df) == p0[100:200] + [r for r in everything if r[0] == 1]


def test_starting_timestamp(spark: Any, fine_broker: RunningBroker) -> None:
    """startingTimestamp skips what was appended before it (to within one index interval) and keeps all after."""
    create(fine_broker, "timed", 1)
    produce(fine_broker, "timed", 0, values("old", 200))
    time.sleep(0.05)
    cut_ms = int(time.time() * 1000)
    time.sleep(0.05)
    produce(fine_broker, "timed", 0, values("new", 100))
    got = [r[2] for r in rows_of(read(spark, fine_broker, subscribe="timed", startingTimestamp=str(cut_ms)))]
    new = values("new", 100)
    assert got[-100:] == new
    assert len(got) - 100 <= 5  # the index interval (64 bytes) covers a few old messages at most


def test_subscribe_pattern_and_assign(spark: Any, two_partitions: RunningBroker) -> None:
    """subscribePattern matches whole topic names; assign reads only the named partitions."""
    create(two_partitions, "events-extra", 1)
    produce(two_partitions, "events-extra", 0, [b"x"])
    by_pattern = read(spark, two_partitions, subscribePattern="events.*").select("topic").distinct().collect()
    assert sorted(r.topic for r in by_pattern) == ["events", "events-extra"]
    assert read(spark, two_partitions, subscribePattern="vents").count() == 0
    assigned = read(spark, two_partitions, assign=json.dumps({"events": [1]}))
    assert rows_of(assigned) == [r for r in sorted(topic_rows(two_partitions, "events", 2)) if r[0] == 1]


def test_byte_range_split_equals_one_task(spark: Any, broker: RunningBroker) -> None:
    """Splitting a large partition into byte ranges gives exactly the rows of a single task."""
    create(broker, "big", 1)
    for chunk in range(4):
        produce(broker, "big", 0, values(f"c{chunk}", 2000))
    whole = read(spark, broker, subscribe="big")
    split = read(spark, broker, subscribe="big", splitBytes="20000")
    assert whole.rdd.getNumPartitions() == 1
    assert split.rdd.getNumPartitions() >= 8
    assert rows_of(split) == rows_of(whole) == sorted(topic_rows(broker, "big", 1))
    assert read(spark, broker, subscribe="big", minPartitions="4").rdd.getNumPartitions() == 4


@pytest.mark.parametrize("options, message", [
    ({"subscribe": "missing"}, "topic 'missing' does not exist"),
    ({"subscribe": "events", "startingOffsets": "{not json"}, "option 'startingOffsets' must be"),
    ({"subscribe": "events", "startingOffsets": '{"events": {"0": 999999999}}'}, "outside the log"),
    ({"subscribe": "events", "startingOffsets": '{"events": {"0": 3}}'}, "not the start of a message"),
    ({"subscribe": "events", "endingOffsets": '{"events": {"0": -2}}'}, "-1 (latest)"),
    ({"subscribe": "events", "startingOffsets": '{"events": {"7": 0}}'}, "has 2 partitions"),
    ({"subscribe": "events", "subscribePattern": "e.*"}, "exactly one of the options"),
    ({"subscribe": "events", "startingOfsets": "earliest"}, "unknown option(s) startingofsets"),
    ({"subscribe": "events", "maxOffsetsPerTrigger": "10"}, "for streaming reads only"),
    ({"subscribe": "events", "startingOffsets": "latest"}, "can't be latest for batch queries"),
    ({"subscribe": "events", "includeHeaders": "true"}, "has no record headers"),
])
def test_bad_options_fail_at_planning(spark: Any, two_partitions: RunningBroker, options: dict[str, str],
                                      message: str) -> None:
    """A bad option fails the query while Spark plans it (an AnalysisException, no task runs), saying what is wrong."""
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException) as failure:
        read(spark, two_partitions, **options).collect()
    assert message in str(failure.value)
    assert "SourceOptionError: " in str(failure.value)


def test_bad_option_fails_at_load(spark: Any, broker: RunningBroker) -> None:
    """An option that is wrong for any read fails load() itself, with the one-line SourceOptionError."""
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException, match="SourceOptionError: option 'failOnDataLoss' must be true or false"):
        read(spark, broker, subscribe="anything", failOnDataLoss="perhaps")


def test_time_options_and_spark_aliases(spark: Any, fine_broker: RunningBroker) -> None:
    """startingOffsetsByTimestamp / endingTimestamp / endingOffsetsByTimestamp cut at the time index (64-byte
    interval here: a few messages); startingTimestamp past the log end fails as Spark's does, or starts at the end
    with the strategy latest; maxRecordsPerPartition splits by messages; kafka.* aliases name rill's options."""
    create(fine_broker, "times", 1)
    produce(fine_broker, "times", 0, values("old", 100))
    time.sleep(0.05)
    cut_ms = int(time.time() * 1000)
    time.sleep(0.05)
    produce(fine_broker, "times", 0, values("new", 100))
    later_ms = int(time.time() * 1000) + 60_000
    old, new = values("old", 100), values("new", 100)

    def got(**options: str) -> list[bytes]:
        return [r[2] for r in rows_of(read(spark, fine_broker, subscribe="times", **options))]

    started = got(startingOffsetsByTimestamp=json.dumps({"times": {"0": cut_ms}}))
    assert started[-100:] == new and len(started) - 100 <= 5
    ended = got(endingTimestamp=str(cut_ms))
    assert ended == old[:len(ended)] and 95 <= len(ended) <= 100
    assert got(endingOffsetsByTimestamp=json.dumps({"times": {"0": cut_ms}})) == ended  # the same cut
    assert got(endingTimestamp=str(later_ms)) == old + new  # past the end: latest, as Spark's
    assert got(startingTimestamp=str(later_ms), startingOffsetsByTimestampStrategy="latest") == []
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException, match="no message of times-0 was appended at or after"):
        got(startingTimestamp=str(later_ms))
    split = read(spark, fine_broker, subscribe="times", maxRecordsPerPartition="50",
                 **{"kafka.max.partition.fetch.bytes": "1000"})
    assert split.rdd.getNumPartitions() >= 4
    assert rows_of(split) == sorted(topic_rows(fine_broker, "times", 1))
