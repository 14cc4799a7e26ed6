"""Partitions that appear after a group subscribed start at their beginning, whatever auto.offset.reset says.

Seed 003: "For newly added partitions and topics, the offset is set to smallest". With
``auto.offset.reset=latest`` a topic created after the subscription (by name or by
pattern) must still deliver its first messages, to the member that subscribed first
and to a member that joins later.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from rill.broker.testing import RunningBroker
from rill.client.consumer import Consumer
from rill.client.grpc_client import AdminClient
from rill.client.protocol.messages import Message
from rill.client.simple import SimpleConsumer, SimpleProducer
from tests.broker.group_consumers import consumer_factory, short_session_broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with short_session_broker(tmp_path, partitions=2) as b:
        yield b


@pytest.fixture
def consumers(broker: RunningBroker) -> Iterator[Callable[..., Consumer]]:
    yield from consumer_factory(broker, auto_offset_reset="latest", metadata_max_age_ms=100)


def create_and_fill(broker: RunningBroker, topic: str, partitions: int, count: int) -> list[bytes]:
    """Create ``topic`` and append ``count`` numbered messages spread over its partitions; their values."""
    with SimpleConsumer(broker.host, broker.port, timeout=10) as client:
        client.create_topic(topic, partitions)
    sent = [f"{topic}-{i}".encode() for i in range(count)]
    with SimpleProducer(broker.host, broker.port, timeout=10) as producer:
        for p in range(partitions):
            producer.send(topic, sent[p::partitions], p)
    return sent


def poll_until(consumers: Sequence[Consumer], done: Callable[[list[Message]], bool],
               timeout: float = 10.0) -> list[Message]:
    """Poll every consumer in turn (short polls) until ``done(messages so far)`` or ``timeout``."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while not done(got) and time.monotonic() < deadline:
        for consumer in consumers:
            got.extend(consumer.poll(0.02))
    return got


def joined(consumer: Consumer, timeout: float = 5.0) -> None:
    """Poll until ``consumer`` is a member (it has a generation); no message may arrive meanwhile."""
    assert poll_until([consumer], lambda _got: consumer.generation >= 1, timeout) == []


def test_a_topic_created_after_add_topic_is_read_from_its_beginning(broker: RunningBroker, consumers) -> None:
    """add_topic(topic) before the topic exists, auto.offset.reset=latest: its first 20 messages are delivered."""
    c = consumers()
    c.add_topic("fresh")
    joined(c)
    sent = create_and_fill(broker, "fresh", 2, 20)
    got = poll_until([c], lambda got: len(got) >= 20)
    assert sorted(m.value for m in got) == sorted(sent)


def test_a_topic_matching_a_pattern_is_read_from_its_beginning(broker: RunningBroker, consumers) -> None:
    """subscribe(pattern=...) matching nothing yet, latest: a matching topic created later delivers all 20 messages."""
    c = consumers()
    c.subscribe(pattern=r"fresh-.*")
    joined(c)
    sent = create_and_fill(broker, "fresh-1", 2, 20)
    got = poll_until([c], lambda got: len(got) >= 20)
    assert sorted(m.value for m in got) == sorted(sent)
    assert c.subscription() == {"fresh-1"}


def test_a_member_that_joins_later_also_starts_new_partitions_at_their_beginning(
        broker: RunningBroker, consumers) -> None:
    """A second member joining after the topic appeared gets some of its partitions: they start at 0 too."""
    first = consumers()
    first.add_topic("fresh")
    joined(first)
    sent = create_and_fill(broker, "fresh", 2, 20)
    second = consumers()
    second.add_topic("fresh")
    got = poll_until([first, second], lambda got: len(got) >= 20)
    assert sorted(m.value for m in got) == sorted(sent)
    assert first.assignment() and second.assignment()


def test_a_pattern_member_that_joins_after_the_topic_appeared_reads_it_from_its_beginning(
        broker: RunningBroker, consumers) -> None:
    """Two pattern subscribers; the second starts after the matching topic appeared (so for it the topic is
    old), and takes some of its partitions: every message is still delivered."""
    first = consumers()
    first.subscribe(pattern=r"fresh-.*")
    joined(first)
    sent = create_and_fill(broker, "fresh-1", 2, 20)
    second = consumers()
    second.subscribe(pattern=r"fresh-.*")
    got = poll_until([first, second], lambda got: len(got) >= 20)
    assert sorted(m.value for m in got) == sorted(sent)
    assert first.assignment() and second.assignment()


def test_the_start_of_a_new_partition_is_committed_for_later_owners(broker: RunningBroker, consumers) -> None:
    """The coordinator commits a new partition's start when it first assigns it: an owner that never
    committed hands it over, and the next owner still starts at 0, not at the end."""
    first = consumers(enable_auto_commit=False)
    first.add_topic("fresh")
    joined(first)
    sent = create_and_fill(broker, "fresh", 2, 20)
    assert len(poll_until([first], lambda got: len(got) >= 20)) == 20
    with AdminClient(broker.grpc_address, timeout=10) as admin:
        committed = admin.fetch_offsets("g", [("fresh", 0), ("fresh", 1)])
    assert [o.offset for o in committed.offsets] == [0, 0]
    first.close()  # nothing committed by it: the partitions go to the next member as they were
    later = consumers()
    later.add_topic("fresh")
    got = poll_until([later], lambda got: len(got) >= 20)
    assert sorted(m.value for m in got) == sorted(sent)
