"""``for message in consumer:``: one message per next(), positions moved per message, consumer.timeout.ms."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rill.broker.testing import RunningBroker
from rill.client.client_config import ConfigError
from rill.client.consumer import Consumer
from rill.client.simple import SimpleConsumer, SimpleProducer
from tests.broker.group_consumers import consumer_factory, short_session_broker

COUNT = 30


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with short_session_broker(tmp_path, partitions=2) as b:
        yield b


@pytest.fixture
def consumers(broker: RunningBroker) -> Iterator[Callable[..., Consumer]]:
    yield from consumer_factory(broker, consumer_timeout_ms=300)


@pytest.fixture
def ends(broker: RunningBroker) -> list[int]:
    """Topic "t", partition 0: m0..m29; the offset after each."""
    with SimpleConsumer(broker.host, broker.port, timeout=10) as client:
        client.create_topic("t", 1)
    with SimpleProducer(broker.host, broker.port, timeout=10) as producer:
        return [producer.send("t", [f"m{i}".encode()], 0).next_offset for i in range(COUNT)]


def expected(start: int = 0, stop: int = COUNT) -> list[bytes]:
    return [f"m{i}".encode() for i in range(start, stop)]


def test_iteration_yields_every_message_then_stops_after_the_timeout(consumers, ends) -> None:
    """A for loop gets each message once, in order; with consumer_timeout_ms it ends about that long after
    the last message instead of blocking forever."""
    c = consumers()
    c.add_topic("t")
    got = []
    for message in c:
        got.append(message.value)
        if len(got) == COUNT:
            stopped_waiting = time.monotonic()
    assert got == expected()
    waited = time.monotonic() - stopped_waiting
    assert 0.3 <= waited < 2.0
    assert list(itertools.islice(c, 1)) == []  # a new loop: still nothing, ends again


def test_positions_move_one_message_at_a_time(consumers, ends) -> None:
    """Taking three messages with next() moves the position past the third only, although poll() fetched
    more: commit() stores that, and a consumer taking over starts at the fourth."""
    c = consumers(max_poll_records=COUNT, enable_auto_commit=False)
    c.add_topic("t")
    taken = [next(c) for _ in range(3)]
    assert [m.value for m in taken] == expected(0, 3)
    assert c.metrics()["records_buffered"] >= COUNT - 3
    assert c.position(("t", 0)) == ends[2]
    c.commit()
    assert c.committed(("t", 0)) == ends[2]
    c.close()
    later = consumers(enable_auto_commit=False)
    later.add_topic("t")
    assert [m.value for m in later][:1] == expected(3, 4)


def test_close_during_iteration_auto_commits_only_what_was_returned(consumers, ends) -> None:
    """Breaking out of the loop and closing: auto-commit stores the position after the last message returned."""
    c = consumers(max_poll_records=COUNT)
    c.add_topic("t")
    for message in c:
        if message.value == b"m9":
            break
    c.close()
    later = consumers()
    later.add_topic("t")
    assert [m.value for m in later] == expected(10)


def test_poll_returns_what_the_iterator_still_holds_first(consumers, ends) -> None:
    """Mixing poll() with iteration loses and repeats nothing."""
    c = consumers(max_poll_records=COUNT)
    c.add_topic("t")
    first = [next(c).value for _ in range(5)]
    rest = []
    deadline = time.monotonic() + 10
    while len(first) + len(rest) < COUNT:
        assert time.monotonic() < deadline
        rest += [m.value for m in c.poll(0.05, max_records=7)]
    assert first + rest == expected()


def test_a_seek_drops_what_the_iterator_held(consumers, ends) -> None:
    """seek() during iteration: the held messages of that partition are dropped; iteration goes on from
    the new position."""
    c = consumers(max_poll_records=COUNT)
    c.add_topic("t")
    assert next(c).value == b"m0"
    c.seek("t", 0, ends[19])
    assert [m.value for m in c] == expected(20)


def test_a_paused_partition_keeps_its_held_messages_until_resumed(consumers, ends) -> None:
    """pause() during iteration: nothing more of it is returned (the loop ends by timeout); after resume()
    the held messages come, from where it stopped."""
    c = consumers(max_poll_records=COUNT)
    c.add_topic("t")
    assert next(c).value == b"m0"
    c.pause(("t", 0))
    assert list(c) == []
    c.resume(("t", 0))
    assert [m.value for m in c] == expected(1)


def test_without_a_timeout_iteration_waits_for_messages(broker, consumers) -> None:
    """consumer.timeout.ms -1 (the default): next() waits until a message comes."""
    with SimpleConsumer(broker.host, broker.port, timeout=10) as client:
        client.create_topic("late", 1)
    c = consumers(consumer_timeout_ms=-1)
    c.add_topic("late")
    assert c.poll(0.3) == []
    with SimpleProducer(broker.host, broker.port, timeout=10) as producer:
        producer.send("late", [b"here"], 0)
    assert next(iter(c)).value == b"here"


def test_the_setting_takes_kafka_python_spellings(broker) -> None:
    """consumer_timeout_ms: milliseconds, -1, None or float('inf') for forever; below -1 is refused."""
    for value, stored in ((250, 250), (-1, -1), (None, -1), (float("inf"), -1)):
        with Consumer(bootstrap_servers=broker.address, consumer_timeout_ms=value) as c:
            assert c.config["consumer.timeout.ms"] == stored
    with Consumer(bootstrap_servers=broker.address) as c:
        assert c.config["consumer.timeout.ms"] == -1
    with pytest.raises(ConfigError, match="consumer.timeout.ms"):
        Consumer(bootstrap_servers=broker.address, consumer_timeout_ms=-5)


def test_a_closed_consumer_ends_the_iteration(consumers, ends) -> None:
    """As kafka-python's iterator: next() on a closed consumer raises StopIteration."""
    c = consumers()
    c.add_topic("t")
    assert next(c).value == b"m0"
    c.close()
    assert list(c) == []
