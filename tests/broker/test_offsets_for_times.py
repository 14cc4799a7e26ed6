"""Consumer.offsets_for_times(): the OFFSETS request's answer for a time, with its append time."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rill.broker.testing import RunningBroker, running_broker
from rill.client.consumer import Consumer, OffsetAndTimestamp, TopicPartition
from rill.client.simple import SimpleConsumer, SimpleProducer

TP = TopicPartition("t", 0)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    # an index entry for every append 1 ms after the previous entry: the answers below are exact to a message
    with running_broker(tmp_path / "data", num_partitions=1, log_index_interval_ms=1) as b:
        yield b


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture
def history(broker: RunningBroker) -> dict[str, int]:
    """a0, a1, a2 appended one by one, then the time "between", then b0..b2 in one append: offsets and times."""
    with SimpleConsumer(broker.host, broker.port, timeout=10) as client:
        client.create_topic("t", 1)
    marks: dict[str, int] = {}
    with SimpleProducer(broker.host, broker.port, timeout=10) as producer:
        marks["start"] = now_ms()
        for name in ("a0", "a1", "a2"):
            marks[name] = producer.send("t", [name.encode()], 0).first_offset
            time.sleep(0.02)
        marks["between"] = now_ms()
        time.sleep(0.02)
        marks["b0"] = producer.send("t", [b"b0", b"b1", b"b2"], 0).first_offset
    marks["after"] = now_ms() + 60_000
    return marks


@pytest.fixture
def consumer(broker: RunningBroker) -> Iterator[Consumer]:
    with Consumer(bootstrap_servers=broker.address, fetch_max_wait_ms=100) as c:
        yield c


def test_a_time_between_appends_gives_the_last_entry_before_it(consumer: Consumer, history) -> None:
    """For a time between a2 and b0 the answer is a2 (the newest index entry appended before the time: at
    most one index interval early, never late), with a2's append time."""
    found = consumer.offsets_for_times({TP: history["between"]})[TP]
    assert isinstance(found, OffsetAndTimestamp)
    assert found.offset == history["a2"]
    assert history["start"] <= found.timestamp <= history["between"]


def test_reading_from_the_answer_misses_nothing_appended_after_the_time(consumer: Consumer, history) -> None:
    """Seeking to the offset found and reading returns every message appended at or after the time."""
    found = consumer.offsets_for_times({("t", 0): history["between"]})[TP]
    assert found is not None
    consumer.assign([TP])
    consumer.seek("t", 0, found.offset)
    got: list[bytes] = []
    deadline = time.monotonic() + 10
    while b"b2" not in got:
        assert time.monotonic() < deadline
        got += [m.value for m in consumer.poll(0.05)]
    assert got[-3:] == [b"b0", b"b1", b"b2"]


def test_a_time_before_everything_gives_the_log_start(consumer: Consumer, history) -> None:
    """A time before the first append: the first message, with its append time (at or after the time)."""
    found = consumer.offsets_for_times({TP: 0})[TP]
    assert found is not None and found.offset == history["a0"] == 0
    assert found.timestamp >= history["start"]


def test_a_time_after_the_last_append_gives_none(consumer: Consumer, history) -> None:
    """Nothing appended at or after the time: None (kafka-python's answer too)."""
    assert consumer.offsets_for_times({TP: history["after"]}) == {TP: None}


def test_negative_times_are_refused(consumer: Consumer, history) -> None:
    """-1 and -2 mean latest and earliest in the OFFSETS request: offsets_for_times refuses negative times."""
    with pytest.raises(ValueError, match="timestamps must be >= 0"):
        consumer.offsets_for_times({TP: -1})
