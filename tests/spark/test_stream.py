"""Streaming reads with real Spark: checkpointed byte offsets, restarts, triggers, new partitions."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from structlog.testing import capture_logs

from rill.broker.testing import RunningBroker, running_broker
from rill.client.simple import SimpleConsumer
from rill.client.spark.data_loss import DataLossError
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
    batches = run_until_caught_up(spark, broker, tmp_path, subscribe="clicks", maxBytesPerTrigger="2000")
    assert sum(batches) == 300
    # The byte budget splits the backlog into micro-batches; pyspark 4.0/4.1 do not cap a new query's first one.
    assert len(batches) >= (3 if limits_passed() else 1)
    for p in range(2):
        produce(broker, "clicks", p, [f"second-{p}-{i}".encode() for i in range(70)])
    again = run_until_caught_up(spark, broker, tmp_path, subscribe="clicks", maxBytesPerTrigger="1000")
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


def read_limit(name: str, n: int) -> Any:
    """pyspark's ReadMaxBytes(n) / ReadMaxRows(n); a stand-in on 4.0/4.1, which have no ReadLimit types (and
    never pass one)."""
    try:
        from pyspark.sql.streaming import datasource
    except ImportError:
        return SimpleNamespace(**{"ReadMaxBytes": {"max_bytes": n}, "ReadMaxRows": {"max_rows": n}}[name])
    return getattr(datasource, name)(n)


def capped_reader(broker: RunningBroker, **options: str) -> RillStreamReader:
    """A stream reader of topic "sig" (50 messages of 100 bytes on the log), 1050 bytes per micro-batch."""
    create(broker, "sig", 1)
    produce(broker, "sig", 0, [b"x" * 90] * 50)  # 100 bytes per message on the log
    return new_reader(broker, **options)


def new_reader(broker: RunningBroker, **options: str) -> RillStreamReader:
    return RillStreamReader(parse_read_options(
        {"bootstrap": broker.address, "subscribe": "sig", "startingOffsets": "earliest",
         "maxBytesPerTrigger": "1050", **options}, streaming=True))


def test_latest_offset_both_signatures(broker: RunningBroker) -> None:
    """latestOffset() (pyspark 4.0/4.1) and latestOffset(start, limit) (4.2+) both cap at message boundaries."""
    reader = capped_reader(broker)
    start = reader.initialOffset()
    assert start == {"sig": {"0": 0}}
    assert reader.latestOffset(start, read_limit("ReadMaxBytes", 1050)) == {"sig": {"0": 1000}}
    assert reader.latestOffset() == {"sig": {"0": 2000}}  # legacy: from the offsets it returned last
    assert reader.latestOffset({"sig": {"0": 4900}}, read_limit("ReadMaxBytes", 10)) == {"sig": {"0": 5000}}
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


def test_trigger_limits_in_messages(broker: RunningBroker) -> None:
    """maxOffsetsPerTrigger counts messages as Spark's does (a limit's max_rows too); minOffsetsPerTrigger holds a
    micro-batch back until that many messages wait, unless maxTriggerDelay passed since the last one."""
    reader = capped_reader(broker, maxBytesPerTrigger="1000000", maxOffsetsPerTrigger="7")
    start = reader.initialOffset()
    assert reader.latestOffset(start, read_limit("ReadMaxRows", 7)) == {"sig": {"0": 700}}  # 7 messages of 100 B
    assert reader.latestOffset() == {"sig": {"0": 1400}}
    assert reader.latestOffset({"sig": {"0": 4800}}, read_limit("ReadMaxRows", 7)) == {"sig": {"0": 5000}}
    waiting = new_reader(broker, minOffsetsPerTrigger="10", maxTriggerDelay="1h", maxBytesPerTrigger="1000000")
    assert waiting.latestOffset({"sig": {"0": 0}}, None) == {"sig": {"0": 5000}}  # the first batch is never held
    assert waiting.latestOffset({"sig": {"0": 4500}}, None) == {"sig": {"0": 4500}}  # 5 messages < 10: wait
    assert waiting.latestOffset({"sig": {"0": 4000}}, None) == {"sig": {"0": 5000}}  # 10 messages: go
    hurried = new_reader(broker, minOffsetsPerTrigger="10", maxTriggerDelay="0s", maxBytesPerTrigger="1000000")
    hurried.latestOffset({"sig": {"0": 0}}, None)
    assert hurried.latestOffset({"sig": {"0": 4500}}, None) == {"sig": {"0": 5000}}  # the delay passed: go


@pytest.fixture
def retention_broker(tmp_path: Path) -> Any:
    """A broker that keeps about 2 KB per partition (1 KB segments, retention checked every 100 ms)."""
    with running_broker(tmp_path / "retained", num_partitions=1, log_segment_bytes=1024, log_retention_bytes=2048,
                        log_retention_check_interval_ms=100) as b:
        yield b


def produce_past_retention(broker: RunningBroker, topic: str, beyond: int, values: list[bytes]) -> int:
    """Produce ``values`` (10 per append: a segment rolls between appends) and wait until retention deleted the
    log up past ``beyond``; the new log start."""
    for i in range(0, len(values), 10):
        produce(broker, topic, 0, values[i:i + 10])
    deadline = time.monotonic() + 20
    with SimpleConsumer(broker.host, broker.port) as c:
        while (low := c.earliest_offset(topic, 0)) <= beyond:
            assert time.monotonic() < deadline, "retention did not run"
            time.sleep(0.05)
    return low


def test_fail_on_data_loss_across_a_retention_gap(spark: Any, retention_broker: RunningBroker,
                                                  tmp_path: Path) -> None:
    """A checkpoint behind the log start fails by default, naming failOnDataLoss; with false the deleted range is
    skipped with a warning naming it, and the stream reads on (Trigger.AvailableNow, maxOffsetsPerTrigger in
    messages)."""
    create(retention_broker, "gap", 1)
    produce(retention_broker, "gap", 0, [b"a" * 90] * 12)  # 100 bytes each
    trigger_options = dict(subscribe="gap", failOnDataLoss="false")

    def run_available_now(max_offsets: str) -> list[int]:
        query = (spark.readStream.format("rill").option("bootstrap", retention_broker.address)
                 .option("startingOffsets", "earliest").options(**trigger_options, maxOffsetsPerTrigger=max_offsets)
                 .load()
                 .writeStream.format("parquet").option("path", str(tmp_path / "data"))
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
        query.awaitTermination(60)
        assert query.exception() is None
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    first = run_available_now("5")
    assert sum(first) == 12 and (len(first) >= 3 or not limits_passed())  # 5 + 5 + 2 messages
    low = produce_past_retention(retention_broker, "gap", 1200, [b"b" * 90] * 40)
    strict = RillStreamReader(parse_read_options({"bootstrap": retention_broker.address, "subscribe": "gap"},
                                                 streaming=True))
    with pytest.raises(DataLossError, match=r"offsets \[1200, \d+\) were deleted.*failOnDataLoss=false"):
        strict.partitions({"gap": {"0": 1200}}, {"gap": {"0": 4000}})
    lenient = RillStreamReader(parse_read_options({"bootstrap": retention_broker.address, **trigger_options},
                                                  streaming=True))
    with capture_logs() as logs:
        assert [r.start for r in lenient.partitions({"gap": {"0": 1200}}, {"gap": {"0": low + 100}})] == [low]
    assert [(e["topic"], e["partition"], e["skipped_from"]) for e in logs if e["event"] == "spark.data_loss"] == [
        ("gap", 0, 1200)]
    run_available_now("1000")
    got = [bytes(r.value) for r in spark.read.parquet(str(tmp_path / "data")).orderBy("offset").collect()]
    assert got == [b"a" * 90] * 12 + [v for _, _, v in topic_rows(retention_broker, "gap", 1)]


def test_bad_stream_option_fails_at_load_with_its_message_first(spark: Any, broker: RunningBroker,
                                                                 tmp_path: Path) -> None:
    """A bad option fails readStream...load() with the one-line SourceOptionError, before any query starts; an option
    only a stream refuses fails its first trigger with that message, not pyspark's UnboundLocalError."""
    from pyspark.errors import AnalysisException

    create(broker, "opts", 1)
    with pytest.raises(AnalysisException) as at_load:
        spark.readStream.format("rill").option("bootstrap", broker.address).option("subscribe", "opts") \
            .option("bogus", "1").load()
    text = str(at_load.value)
    assert "SourceOptionError: unknown option(s) bogus for the rill source" in text
    assert text.index("SourceOptionError") < text.index("Error", text.index("Traceback")) + 40
    assert spark.streams.active == []
    query = (spark.readStream.format("rill").option("bootstrap", broker.address).option("subscribe", "opts")
             .option("endingOffsets", "latest").load().writeStream.format("noop")
             .option("checkpointLocation", str(tmp_path / "cp")).start())
    with pytest.raises(Exception) as at_trigger:
        query.processAllAvailable()
    query.stop()
    assert "option 'endingOffsets' is for batch reads only" in str(at_trigger.value)
    assert "UnboundLocalError" not in str(at_trigger.value)
