"""SimpleConsumer and SimpleProducer against a real in-process broker."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from rill.broker.testing import RunningBroker, running_broker
from rill.client.errors import (ConnectionClosed, CorruptMessageError, InvalidFetchSize, InvalidOffset, InvalidTopic,
                                InvalidRequest, MessageTooLarge, OffsetOutOfRange, UnknownTopic, WrongPartition)
from rill.client.protocol.messages import CODEC_GZIP, Message, encode_message_set
from rill.client.protocol.requests import ANY_PARTITION, EARLIEST_TIME, LATEST_TIME, Acks, FetchRequest
from rill.client.simple import SimpleConsumer, SimpleProducer


@pytest.fixture
def producer(broker: RunningBroker) -> Iterator[SimpleProducer]:
    with SimpleProducer(broker.host, broker.port, timeout=10) as p:
        yield p


@pytest.fixture
def consumer(broker: RunningBroker) -> Iterator[SimpleConsumer]:
    with SimpleConsumer(broker.host, broker.port, timeout=10) as c:
        yield c


def values(messages: Sequence[Message]) -> list[bytes]:
    return [m.value for m in messages]


# ---------------------------------------------------------------- produce and fetch


def test_send_then_fetch_returns_payloads_at_byte_offsets(producer: SimpleProducer, consumer: SimpleConsumer) -> None:
    """Acknowledged messages come back in order, each at offset + 4 + length of the previous one."""
    ack = producer.send("t", [b"one", b"two", b"three"], 0)
    assert (ack.error, ack.partition, ack.first_offset) == (0, 0, 0)
    assert ack.next_offset == len(encode_message_set([b"one", b"two", b"three"]))
    messages = consumer.fetch("t", 0, 0)
    assert values(messages) == [b"one", b"two", b"three"]
    assert [m.offset for m in messages] == [0, 13, 26]
    assert messages[-1].next_offset == ack.next_offset
    assert consumer.fetch("t", 0, messages[1].offset)[0].value == b"two"


def test_fetch_at_the_log_end_is_empty(producer: SimpleProducer, consumer: SimpleConsumer) -> None:
    """Fetching at the log end returns no messages (and no error)."""
    ack = producer.send("t", [b"x"], 1)
    assert consumer.fetch("t", 1, ack.next_offset) == []


def test_fetch_of_an_unknown_topic_is_empty(consumer: SimpleConsumer) -> None:
    """As in Kafka 0.7, a topic the broker does not have fetches as an empty set."""
    assert consumer.fetch("nothing-here", 0, 0) == []


def test_fetch_past_the_end_raises_offset_out_of_range(producer: SimpleProducer, consumer: SimpleConsumer) -> None:
    """An offset beyond the log end raises OffsetOutOfRange."""
    ack = producer.send("t", [b"x"], 0)
    with pytest.raises(OffsetOutOfRange):
        consumer.fetch("t", 0, ack.next_offset + 1000)


def test_fetch_inside_a_message_raises_invalid_offset(producer: SimpleProducer, consumer: SimpleConsumer) -> None:
    """An offset that is not a message boundary raises InvalidOffset."""
    producer.send("t", [b"hello", b"world"], 0)
    with pytest.raises(InvalidOffset):
        consumer.fetch("t", 0, 3)


def test_fetch_ends_on_a_message_boundary(producer: SimpleProducer, consumer: SimpleConsumer) -> None:
    """A max_size that cuts the second message returns only the first."""
    producer.send("t", [b"a" * 50, b"b" * 50], 0)
    assert values(consumer.fetch("t", 0, 0, max_size=100)) == [b"a" * 50]


def test_message_larger_than_the_fetch_size_is_fetched_with_a_bigger_size(
        broker: RunningBroker, producer: SimpleProducer) -> None:
    """A first message larger than max_fetch_size is still returned (the fetch size grows)."""
    big = bytes(range(256)) * 40
    producer.send("t", [big, b"small"], 0)
    with SimpleConsumer(broker.host, broker.port, max_fetch_size=100, timeout=10) as c, capture_logs() as logs:
        assert values(c.fetch("t", 0, 0))[0] == big
    grown = [e for e in logs if e["event"] == "fetch.size_too_small"]
    assert [(e["fetch_size"], e["new_fetch_size"]) for e in grown] == [(100, 4 + 6 + len(big))]


def test_fetch_size_smaller_than_a_length_field_still_works(broker: RunningBroker, producer: SimpleProducer) -> None:
    """A fetch size below 4 bytes (not even the length field arrives) grows until the message fits."""
    producer.send("t", [b"tiny", b"next"], 0)
    with SimpleConsumer(broker.host, broker.port, max_fetch_size=1, timeout=10) as c:
        assert values(c.fetch("t", 0, 0)) == [b"tiny"]


def test_message_larger_than_the_limit_raises_invalid_fetch_size(
        broker: RunningBroker, producer: SimpleProducer) -> None:
    """A message that does not fit even in fetch_size_limit raises InvalidFetchSize."""
    producer.send("t", [b"z" * 5000], 0)
    with SimpleConsumer(broker.host, broker.port, max_fetch_size=100, fetch_size_limit=1000, timeout=10) as c:
        with pytest.raises(InvalidFetchSize):
            c.fetch("t", 0, 0)


def test_gzip_batches_decode_to_single_messages(broker: RunningBroker, consumer: SimpleConsumer) -> None:
    """A gzip producer's batch comes back as its messages; the last one's next offset is the ack's."""
    with SimpleProducer(broker.host, broker.port, codec=CODEC_GZIP, timeout=10) as p:
        ack = p.send("t", [b"x" * 100, b"y" * 100, b"z"], 1)
    messages = consumer.fetch("t", 1, 0)
    assert values(messages) == [b"x" * 100, b"y" * 100, b"z"]
    assert messages[-1].next_offset == ack.next_offset
    assert ack.next_offset < 200  # compressed on the wire and on disk


def test_any_partition_spreads_sends(producer: SimpleProducer, consumer: SimpleConsumer) -> None:
    """ANY_PARTITION lets the broker choose; successive sends use both partitions of the topic."""
    acks = [producer.send("t", [b"m"], ANY_PARTITION) for _ in range(4)]
    assert {a.partition for a in acks} == {0, 1}
    assert sum(len(consumer.fetch("t", p, 0)) for p in (0, 1)) == 4


def test_send_to_a_missing_partition_raises_wrong_partition(producer: SimpleProducer) -> None:
    """A partition outside the topic's range raises WrongPartition."""
    producer.send("t", [b"create"], 0)
    with pytest.raises(WrongPartition):
        producer.send("t", [b"x"], 7)


def test_send_many_reports_each_partition(producer: SimpleProducer, consumer: SimpleConsumer) -> None:
    """send_many acknowledges each (topic, partition); raise_errors=False returns the failed ones' codes."""
    producer.send("t", [b"create"], 0)
    acks = producer.send_many({("t", 0): [b"a"], ("t", 1): [b"b", b"c"], ("t", 9): [b"d"]}, raise_errors=False)
    assert acks[("t", 0)].error == 0 and acks[("t", 1)].error == 0
    assert acks[("t", 9)].error == WrongPartition.code
    assert values(consumer.fetch("t", 1, acks[("t", 1)].first_offset)) == [b"b", b"c"]
    with pytest.raises(WrongPartition):
        producer.send_many({("t", 0): [b"e"], ("t", 9): [b"f"]})


def test_fsync_acks(broker: RunningBroker, consumer: SimpleConsumer) -> None:
    """acks=FSYNC sends are acknowledged with offsets like acks=APPEND."""
    with SimpleProducer(broker.host, broker.port, acks=Acks.FSYNC, timeout=10) as p:
        ack = p.send("t", [b"durable"], 0)
    assert ack.error == 0 and ack.next_offset > ack.first_offset
    assert values(consumer.fetch("t", 0, ack.first_offset)) == [b"durable"]


def test_fire_and_forget_then_flush(producer: SimpleProducer, consumer: SimpleConsumer) -> None:
    """send_async and send_many_async (0.7 PRODUCE/MULTIPRODUCE) are readable once flush returns."""
    producer.send_async("t", [b"p1", b"p2"], 0)
    producer.send_many_async({("t", 0): [b"p3"], ("t", 1): [b"q1"]})
    producer.flush()
    assert values(consumer.fetch("t", 0, 0)) == [b"p1", b"p2", b"p3"]
    assert values(consumer.fetch("t", 1, 0)) == [b"q1"]


def test_invalid_topic_is_refused_before_sending(producer: SimpleProducer, consumer: SimpleConsumer) -> None:
    """Illegal topic names raise InvalidTopic in the client."""
    with pytest.raises(InvalidTopic):
        producer.send("bad/name", [b"x"])
    with pytest.raises(InvalidTopic):
        consumer.create_topic("..", 1)


def test_message_over_the_broker_maximum_raises_message_too_large(tmp_path: Path) -> None:
    """A payload over message.max.bytes raises MessageTooLarge."""
    with running_broker(tmp_path, message_max_bytes=1000) as b, SimpleProducer(b.host, b.port, timeout=10) as p:
        with pytest.raises(MessageTooLarge):
            p.send("t", [b"x" * 2000], 0)


def test_unknown_topic_without_auto_create(tmp_path: Path) -> None:
    """With auto-creation off, producing to a missing topic raises UnknownTopic."""
    with running_broker(tmp_path, auto_create_topics_enable=False) as b, \
            SimpleProducer(b.host, b.port, timeout=10) as p:
        with pytest.raises(UnknownTopic):
            p.send("missing", [b"x"], 0)


# ---------------------------------------------------------------- multifetch and long poll


def test_multifetch_reports_errors_per_fetch(producer: SimpleProducer, consumer: SimpleConsumer) -> None:
    """One bad fetch carries its error while the other fetches still return their messages."""
    producer.send("t", [b"a"], 0)
    producer.send("t", [b"b"], 1)
    results = consumer.multifetch([FetchRequest("t", 0, 0, 1000), FetchRequest("t", 1, 0, 1000),
                                   FetchRequest("t", 0, 99999, 1000)])
    assert [values(r.messages) for r in results] == [[b"a"], [b"b"], []]
    assert results[0].next_offset == results[0].messages[-1].next_offset
    assert results[0].error is None and results[1].error is None
    assert isinstance(results[2].error, OffsetOutOfRange)
    assert results[2].next_offset == 99999


def test_multifetch_grows_the_size_for_a_large_message(producer: SimpleProducer, consumer: SimpleConsumer) -> None:
    """A fetch whose first message exceeds its max_size is retried alone with a larger size."""
    producer.send("t", [b"L" * 3000], 0)
    producer.send("t", [b"s"], 1)
    results = consumer.multifetch([FetchRequest("t", 0, 0, 100), FetchRequest("t", 1, 0, 100)])
    assert [values(r.messages) for r in results] == [[b"L" * 3000], [b"s"]]
    assert results[0].next_offset == 3010


def test_fetch_wait_times_out_empty(producer: SimpleProducer, consumer: SimpleConsumer) -> None:
    """A long poll at the log end with nothing produced returns empty results after about max_wait_ms."""
    ack = producer.send("t", [b"x"], 0)
    started = time.monotonic()
    results = consumer.fetch_wait([FetchRequest("t", 0, ack.next_offset, 1000)], max_wait_ms=300)
    elapsed = time.monotonic() - started
    assert results[0].messages == [] and results[0].error is None
    assert 0.25 <= elapsed < 5


def test_fetch_wait_wakes_up_on_produce(broker: RunningBroker, producer: SimpleProducer,
                                        consumer: SimpleConsumer) -> None:
    """A long poll returns the new message soon after another client produces it, well before max_wait_ms."""
    ack = producer.send("t", [b"first"], 0)

    def produce_later() -> None:
        time.sleep(0.2)
        with SimpleProducer(broker.host, broker.port, timeout=10) as other:
            other.send("t", [b"second"], 0)

    thread = threading.Thread(target=produce_later)
    thread.start()
    started = time.monotonic()
    results = consumer.fetch_wait([FetchRequest("t", 0, ack.next_offset, 1000)], max_wait_ms=10_000)
    elapsed = time.monotonic() - started
    thread.join()
    assert values(results[0].messages) == [b"second"]
    assert elapsed < 5


# ---------------------------------------------------------------- offsets and topics


def test_earliest_and_latest_offsets(producer: SimpleProducer, consumer: SimpleConsumer) -> None:
    """Earliest is 0 for a new log; latest is the last acknowledgement's next offset."""
    producer.send("t", [b"a"], 0)
    ack = producer.send("t", [b"bb", b"ccc"], 0)
    assert consumer.earliest_offset("t", 0) == 0
    assert consumer.latest_offset("t", 0) == ack.next_offset
    assert consumer.offsets_before("t", 0, LATEST_TIME, 1) == [ack.next_offset]
    assert consumer.offsets_before("t", 0, EARLIEST_TIME, 5) == [0]


def test_offsets_of_a_missing_partition_raise(producer: SimpleProducer, consumer: SimpleConsumer) -> None:
    """OFFSETS for a partition outside the topic raises WrongPartition."""
    producer.send("t", [b"a"], 0)
    with pytest.raises(WrongPartition):
        consumer.latest_offset("t", 5)


def test_time_index_gives_append_times_of_index_entries(producer: SimpleProducer, consumer: SimpleConsumer) -> None:
    """TIME_INDEX answers (offset, append ms) entries from the floor of the offset, ascending."""
    before = int(time.time() * 1000)
    first = producer.send("t", [b"a" * 100], 0)
    second = producer.send("t", [b"b" * 100], 0)
    entries = consumer.time_index("t", 0, 0)
    assert entries[0][0] == first.first_offset and before <= entries[0][1] <= time.time() * 1000
    assert [o for o, _ in entries] == sorted(o for o, _ in entries)
    assert consumer.time_index("t", 0, second.first_offset, 1)[0][0] <= second.first_offset


def test_time_index_errors(producer: SimpleProducer, consumer: SimpleConsumer) -> None:
    """Unknown topic, missing partition, offsets outside the log, negative maximum: errors, not crashes."""
    ack = producer.send("t", [b"a"], 0)
    with pytest.raises(UnknownTopic):
        consumer.time_index("nope", 0, 0)
    with pytest.raises(WrongPartition):
        consumer.time_index("t", 7, 0)
    with pytest.raises(OffsetOutOfRange):
        consumer.time_index("t", 0, ack.next_offset + 1)
    with pytest.raises(InvalidRequest):
        consumer.time_index("t", 0, 0, -1)
    assert consumer.time_index("t", 0, 0)[0][0] == 0  # the connection still works


def test_create_and_list_topics(consumer: SimpleConsumer) -> None:
    """create_topic returns the partition count, and topics() then lists the topic with it."""
    assert consumer.create_topic("events", 3) == 3
    assert consumer.topics()["events"] == 3
    assert consumer.partitions_for("events") == 3
    assert consumer.topics(["events"]) == {"events": 3}


def test_partitions_for_unknown_topic_raises(consumer: SimpleConsumer) -> None:
    """Asking for a topic the broker does not have raises UnknownTopic."""
    with pytest.raises(UnknownTopic):
        consumer.partitions_for("absent")


# ---------------------------------------------------------------- connections and corruption


def test_consumer_reconnects_after_a_broker_restart(tmp_path: Path) -> None:
    """A read on a connection the broker closed (it restarted) reconnects once and succeeds."""
    with running_broker(tmp_path) as b, SimpleProducer(b.host, b.port, timeout=10) as p:
        p.send("t", [b"a"], 0)
        port = b.port
    with SimpleConsumer("127.0.0.1", port, timeout=10) as c:
        with running_broker(tmp_path, port=port):
            assert values(c.fetch("t", 0, 0)) == [b"a"]
        with running_broker(tmp_path, port=port), capture_logs() as logs:
            assert values(c.fetch("t", 0, 0)) == [b"a"]
    assert "client.reconnect" in [e["event"] for e in logs]


def test_unreachable_broker_raises_connection_closed(tmp_path: Path) -> None:
    """Requests to a stopped broker raise ConnectionClosed."""
    with running_broker(tmp_path) as b:
        host, port = b.host, b.port
    with SimpleConsumer(host, port, timeout=2) as c, pytest.raises(ConnectionClosed):
        c.topics()


def test_corrupt_message_on_disk_is_never_delivered(broker: RunningBroker, tmp_path: Path,
                                                    producer: SimpleProducer, consumer: SimpleConsumer) -> None:
    """A payload byte flipped in the segment file makes the fetch raise CorruptMessageError."""
    producer.send("t", [b"good", b"payload-to-corrupt"], 0)
    segment = tmp_path / "data" / "t-0" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[-3] ^= 0x40
    segment.write_bytes(bytes(data))
    with pytest.raises(CorruptMessageError):
        consumer.fetch("t", 0, 0)
