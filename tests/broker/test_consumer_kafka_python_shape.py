"""kafka-python's tutorial shape works unchanged: ``Consumer(*topics, **configs)``, with or without a group.

Without ``group_id`` (kafka-python's ``group_id=None``) the consumer owns every partition of the
topics it subscribed to, with no coordinator and no commits, and picks up topics and partitions
that appear later (from their beginning). With ``group_id`` the same call is a group subscription.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rill.broker.log import files
from rill.broker.testing import RunningBroker, running_broker
from rill.client.consumer import Consumer, IllegalStateError, TopicPartition
from rill.client.protocol.messages import Message
from rill.client.simple import SimpleConsumer, SimpleProducer
from tests.broker.group_consumers import HEARTBEAT_MS, SESSION_MS, short_session_broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with short_session_broker(tmp_path, partitions=2) as b:
        yield b


@pytest.fixture
def consumers(broker: RunningBroker) -> Iterator[Callable[..., Consumer]]:
    """``make(*args, **settings)``: a Consumer on ``broker`` (short fetch waits), closed afterwards."""
    made: list[Consumer] = []

    def make(*args: Any, **settings: Any) -> Consumer:
        consumer = Consumer(*args, **{"bootstrap_servers": [broker.address], "fetch_max_wait_ms": 100, **settings})
        made.append(consumer)
        return consumer

    yield make
    for consumer in made:
        consumer.close()


def create_and_fill(broker: RunningBroker, topic: str, partitions: int, count: int) -> list[bytes]:
    """Create ``topic`` and append ``count`` numbered messages spread over its partitions; their values."""
    with SimpleConsumer(broker.host, broker.port, timeout=10) as client:
        client.create_topic(topic, partitions)
    return produce(broker, topic, partitions, count)


def produce(broker: RunningBroker, topic: str, partitions: int, count: int, prefix: str = "") -> list[bytes]:
    sent = [f"{prefix}{topic}-{i}".encode() for i in range(count)]
    with SimpleProducer(broker.host, broker.port, timeout=10) as producer:
        for p in range(partitions):
            producer.send(topic, sent[p::partitions], p)
    return sent


def poll_until(consumer: Consumer, done: Callable[[list[Message]], bool], timeout: float = 10.0) -> list[Message]:
    """Short polls until ``done(messages so far)`` or ``timeout``."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while not done(got) and time.monotonic() < deadline:
        got.extend(consumer.poll(0.05))
    return got


def test_the_tutorial_snippet_reads_every_message_of_two_topics(broker: RunningBroker, consumers) -> None:
    """Positional topics, no group_id, ``for message in consumer`` with consumer_timeout_ms: every message of
    both topics (all their partitions) once, then the loop ends; commit() is refused (no group)."""
    sent = create_and_fill(broker, "my-topic", 2, 20) + create_and_fill(broker, "other", 1, 5)
    consumer = consumers("my-topic", "other", auto_offset_reset="earliest", consumer_timeout_ms=3000)  # loaded CI machines
    got = []
    for message in consumer:
        got.append((message.topic, message.partition, message.offset, message.value))
    assert sorted(value for _t, _p, _o, value in got) == sorted(sent)
    assert {(t, p) for t, p, _o, _v in got} == {("my-topic", 0), ("my-topic", 1), ("other", 0)}
    assert consumer.assignment() == {TopicPartition("my-topic", 0), TopicPartition("my-topic", 1),
                                     TopicPartition("other", 0)}
    assert consumer.subscription() == {"my-topic", "other"}
    assert consumer.group_id is None and consumer.generation == 0
    with pytest.raises(IllegalStateError, match="group.id"):
        consumer.commit()


def test_without_a_group_auto_offset_reset_latest_skips_what_was_there(broker: RunningBroker, consumers) -> None:
    """Partitions that exist when subscribed start at auto.offset.reset: with latest only later messages come."""
    create_and_fill(broker, "t", 2, 10)
    consumer = consumers("t", auto_offset_reset="latest")
    poll_until(consumer, lambda _got: len(consumer.assignment()) == 2)
    assert [consumer.position(tp) for tp in sorted(consumer.assignment())] == [
        consumer.end_offsets(sorted(consumer.assignment()))[tp] for tp in sorted(consumer.assignment())]
    later = produce(broker, "t", 2, 4, prefix="later-")
    got = poll_until(consumer, lambda got: len(got) >= 4)
    assert sorted(m.value for m in got) == sorted(later)


def test_with_a_group_id_the_topics_are_a_group_subscription(broker: RunningBroker, consumers) -> None:
    """The same call with group_id: the consumer joins the group (a member id, a generation), is assigned
    both topics' partitions by the coordinator, reads every message and can commit."""
    sent = create_and_fill(broker, "my-topic", 2, 20) + create_and_fill(broker, "other", 1, 5)
    consumer = consumers("my-topic", "other", group_id="g", auto_offset_reset="earliest",
                         session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS)
    got = poll_until(consumer, lambda got: len(got) >= len(sent))
    assert sorted(m.value for m in got) == sorted(sent)
    assert consumer.group_id == "g" and consumer.member_id and consumer.generation >= 1
    assert consumer.subscription() == {"my-topic", "other"}
    consumer.commit()
    assert consumer.committed(("other", 0)) == consumer.position(("other", 0))


def test_a_topic_created_after_the_subscription_is_read_from_its_start(broker: RunningBroker, consumers) -> None:
    """No group, auto.offset.reset=latest, the topic does not exist yet: once created (and filled before the
    consumer notices it), every message is read, from its beginning."""
    consumer = consumers("fresh", auto_offset_reset="latest", metadata_max_age_ms=100)
    assert poll_until(consumer, lambda _got: False, timeout=0.3) == []
    assert consumer.assignment() == set()
    sent = create_and_fill(broker, "fresh", 2, 20)
    got = poll_until(consumer, lambda got: len(got) >= 20)
    assert sorted(m.value for m in got) == sorted(sent)
    assert consumer.assignment() == {TopicPartition("fresh", 0), TopicPartition("fresh", 1)}


def test_a_pattern_without_a_group_reads_matching_topics_created_later(broker: RunningBroker, consumers) -> None:
    """No group, subscribe(pattern=...): a matching topic that exists is read from auto.offset.reset, and one
    created later from its beginning; a topic that does not match is not read."""
    create_and_fill(broker, "orders-eu", 1, 3)
    consumer = consumers(auto_offset_reset="latest", metadata_max_age_ms=100)
    consumer.subscribe(pattern=r"orders-.*")
    poll_until(consumer, lambda _got: bool(consumer.assignment()))
    assert consumer.assignment() == {TopicPartition("orders-eu", 0)}
    create_and_fill(broker, "audit", 1, 3)
    sent = create_and_fill(broker, "orders-us", 2, 6)
    got = poll_until(consumer, lambda got: len(got) >= 6)
    assert sorted(m.value for m in got) == sorted(sent)
    assert consumer.subscription() == {"orders-eu", "orders-us"}


def test_a_partition_added_later_is_read_from_its_beginning(tmp_path: Path) -> None:
    """No group, latest: a partition added to a topic already read (Kafka 0.7's way: the broker restarted with
    one more partition directory) is picked up at a metadata refresh and read from offset 0, while the old
    partition goes on from its position."""
    data = tmp_path / "data"
    with running_broker(data, num_partitions=1) as first:
        port = first.port
        create_and_fill(first, "t", 1, 3)
        consumer = Consumer("t", bootstrap_servers=first.address, auto_offset_reset="latest",
                            metadata_max_age_ms=100, fetch_max_wait_ms=100, retry_backoff_ms=50)
        try:
            poll_until(consumer, lambda _got: bool(consumer.assignment()))
            assert consumer.position(("t", 0)) > 0
            first.close()
            (data / files.partition_dir_name("t", 1)).mkdir()
            with running_broker(data, num_partitions=1, port=port) as second:
                assert second.broker.logs.topics()["t"] == 2
                with SimpleProducer(second.host, second.port, timeout=10) as producer:
                    producer.send("t", [b"new-0"], 1)  # before the consumer can know partition 1
                    producer.send("t", [b"new-1"], 1)
                    producer.send("t", [b"after-restart"], 0)
                got = poll_until(consumer, lambda got: len(got) >= 3, timeout=15)
                assert sorted((m.partition, m.value) for m in got) == [(0, b"after-restart"), (1, b"new-0"),
                                                                      (1, b"new-1")]
                assert consumer.assignment() == {TopicPartition("t", 0), TopicPartition("t", 1)}
        finally:
            consumer.close()


def test_a_config_mapping_may_follow_the_topics_or_come_alone(broker: RunningBroker) -> None:
    """``Consumer({...})`` (seed 003's shape) and ``Consumer("t", {...})`` both take the mapping as the config;
    keywords still win over it."""
    sent = create_and_fill(broker, "t", 2, 6)
    config = {"bootstrap.servers": broker.address, "auto.offset.reset": "latest", "fetch.max.wait.ms": 100}
    with Consumer(config, auto_offset_reset="earliest") as alone:
        assert alone.config["auto.offset.reset"] == "earliest" and alone.subscription() == set()
        alone.subscribe(["t"])
        assert sorted(m.value for m in poll_until(alone, lambda got: len(got) >= 6)) == sorted(sent)
    with Consumer("t", {**config, "auto.offset.reset": "earliest"}) as after:
        assert sorted(m.value for m in poll_until(after, lambda got: len(got) >= 6)) == sorted(sent)
    with Consumer(config=config) as keyword:
        assert keyword.config["bootstrap.servers"] == [(broker.host, broker.port)]


def test_add_topic_with_a_partition_stays_static_without_a_group(broker: RunningBroker, consumers) -> None:
    """Without a group, add_topic(topic, partition) reads only that partition; add_topic(topic) alone still
    needs a group.id, and its error points to subscribe([topic])."""
    create_and_fill(broker, "t", 2, 10)
    consumer = consumers(auto_offset_reset="earliest")
    consumer.add_topic("t", 1)
    got = poll_until(consumer, lambda got: len(got) >= 5)
    assert {m.partition for m in got} == {1} and len(got) == 5
    assert poll_until(consumer, lambda _got: False, timeout=0.3) == []
    assert consumer.assignment() == {TopicPartition("t", 1)}
    with pytest.raises(IllegalStateError, match=r"group\.id.*subscribe\(\[topic\]\)"):
        consumer.add_topic("t")


def test_a_static_partition_outlives_its_topic_leaving_the_subscription(broker: RunningBroker, consumers) -> None:
    """No group: subscribe(["t"]) plus add_topic("t", 0); subscribe([]) keeps the static partition only, and
    remove_topic("t", 0) then releases it."""
    create_and_fill(broker, "t", 2, 4)
    consumer = consumers("t")
    consumer.add_topic("t", 0)
    poll_until(consumer, lambda _got: len(consumer.assignment()) == 2)
    consumer.subscribe([])
    assert consumer.assignment() == {TopicPartition("t", 0)}
    consumer.remove_topic("t", 0)
    assert consumer.assignment() == set()


@pytest.mark.parametrize("args, message", [
    (({"group.id": "g"}, "t"), "topic names first"),
    (({"group.id": "g"}, {"client.id": "c"}), "topic names first"),
    ((["a", "b"],), "separate arguments"),
    (("a", b"b"), "topic names"),
    (("a", 3), "topic names"),
])
def test_a_bad_mix_of_positional_arguments_is_a_type_error(args: tuple[Any, ...], message: str) -> None:
    """Positional arguments are topic names, then at most one config mapping, last; anything else is a
    TypeError naming the rule (before any connection is made)."""
    with pytest.raises(TypeError, match=message):
        Consumer(*args)


def test_the_config_twice_is_a_type_error() -> None:
    """A positional mapping and ``config=`` together are refused."""
    with pytest.raises(TypeError, match="twice"):
        Consumer("t", {"group.id": "g"}, config={"group.id": "h"})
