"""Consumer.assign(): manual assignment without group membership (kafka-python's assign; Kafka's
standalone consumer)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from rill.broker.testing import RunningBroker
from rill.client.consumer import CommitFailed, Consumer, IllegalStateError, TopicPartition
from rill.client.grpc_client import AdminClient
from rill.client.protocol.messages import Message
from rill.client.simple import SimpleConsumer, SimpleProducer
from rill.v1 import coordinator_pb2 as pb
from tests.broker.group_consumers import consumer_factory, short_session_broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with short_session_broker(tmp_path, partitions=2) as b:
        yield b


@pytest.fixture
def consumers(broker: RunningBroker) -> Iterator[Callable[..., Consumer]]:
    yield from consumer_factory(broker)


@pytest.fixture
def topic(broker: RunningBroker) -> list[int]:
    """Topic "t": partition 0 holds a0..a4, partition 1 b0..b4; the offsets after each message of partition 0."""
    with SimpleConsumer(broker.host, broker.port, timeout=10) as client:
        client.create_topic("t", 2)
    ends = []
    with SimpleProducer(broker.host, broker.port, timeout=10) as producer:
        for i in range(5):
            ends.append(producer.send("t", [f"a{i}".encode()], 0).next_offset)
        producer.send("t", [f"b{i}".encode() for i in range(5)], 1)
    return ends


def read(consumer: Consumer, count: int, timeout: float = 10.0) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"got {len(got)} of {count}"
        got += consumer.poll(0.05)
    return got


def values(messages: Sequence[Message]) -> list[bytes]:
    return [m.value for m in messages]


def members(broker: RunningBroker, group: str = "g") -> list[str]:
    with AdminClient(broker.grpc_address, timeout=10) as admin:
        info = admin.list_groups([group]).groups_info[0]
    return list(info.group_members) if info.error_code == pb.NONE else []


def test_assign_reads_exactly_those_partitions_without_joining_the_group(broker, consumers, topic) -> None:
    """assign() takes TopicPartitions or tuples; the consumer reads them from auto.offset.reset and never
    registers: no member id, no generation, no member in the group."""
    c = consumers()
    c.assign([TopicPartition("t", 0)])
    assert c.assignment() == {("t", 0)}
    assert values(read(c, 5)) == [f"a{i}".encode() for i in range(5)]
    assert c.poll(0.2) == []
    assert (c.member_id, c.generation) == ("", 0)
    assert members(broker) == []
    c.assign([("t", 1)])
    assert c.assignment() == {TopicPartition("t", 1)}
    assert values(read(c, 5)) == [f"b{i}".encode() for i in range(5)]


def test_positions_start_from_the_committed_offset(broker, consumers, topic) -> None:
    """With group.id, commit() stores standalone offsets; committed() reads them; the next consumer assigned
    the partition starts there (auto.offset.reset only where nothing is committed)."""
    first = consumers(enable_auto_commit=False)
    first.assign([("t", 0), ("t", 1)])
    got = read(first, 10)
    third = next(m for m in got if m.value == b"a2")
    first.commit(offsets={("t", 0): third.next_offset})
    assert first.committed(("t", 0)) == topic[2]
    assert first.committed(("t", 1)) is None
    second = consumers(auto_offset_reset="latest")
    second.assign([("t", 0), ("t", 1)])
    assert values(read(second, 2)) == [b"a3", b"a4"]
    assert second.position(("t", 1)) == second.end_offsets([("t", 1)])[("t", 1)]


def test_assign_keeps_the_positions_of_partitions_it_keeps(consumers, topic) -> None:
    """A partition in both the old and the new assignment keeps its position; a dropped one is gone."""
    c = consumers(enable_auto_commit=False)
    c.assign([("t", 0), ("t", 1)])
    read(c, 10)
    c.seek("t", 0, topic[3])
    c.assign([("t", 0)])
    assert c.position(("t", 0)) == topic[3]
    assert values(read(c, 1)) == [b"a4"]
    with pytest.raises(IllegalStateError):
        c.position(("t", 1))


def test_assign_and_subscriptions_do_not_mix(consumers, topic) -> None:
    """assign() after add_topic()/subscribe() raises IllegalStateError, and the reverse; unsubscribe() in
    between allows either; assign([]) is unsubscribe()."""
    c = consumers()
    c.add_topic("t")
    with pytest.raises(IllegalStateError, match="unsubscribe"):
        c.assign([("t", 0)])
    c.unsubscribe()
    c.assign([("t", 0)])
    for call in (lambda: c.add_topic("t"), lambda: c.add_topic("t", 1), lambda: c.subscribe(["t"]),
                 lambda: c.subscribe(pattern="t.*")):
        with pytest.raises(IllegalStateError, match="assign"):
            call()
    c.assign([])
    assert c.assignment() == set()
    c.add_topic("t", 1)
    with pytest.raises(IllegalStateError):
        c.assign([("t", 0)])


def test_assign_after_a_membership_leaves_the_group_at_once(broker, consumers, topic) -> None:
    """unsubscribe() then assign() (no poll in between): the member leaves the group right away and the
    manual partitions are read."""
    c = consumers()
    c.add_topic("t")
    read(c, 10)
    assert len(members(broker)) == 1
    c.unsubscribe()
    c.assign([("t", 1)])
    assert members(broker) == []
    c.seek_to_beginning()
    assert values(read(c, 5)) == [f"b{i}".encode() for i in range(5)]


def test_a_standalone_commit_is_refused_while_the_group_has_members(consumers, topic) -> None:
    """A manual consumer's commit to a group with a live member fails with NOT_OWNER and stores nothing;
    once the members are gone it is stored."""
    member = consumers()
    member.add_topic("t")
    read(member, 10)
    outsider = consumers(enable_auto_commit=False)
    outsider.assign([("t", 0)])
    read(outsider, 5)
    with pytest.raises(CommitFailed) as failed:
        outsider.commit()
    assert failed.value.code_name == "NOT_OWNER" and "standalone" in str(failed.value)
    member.close()
    outsider.commit()
    assert outsider.committed(("t", 0)) == topic[4]


def test_auto_commit_and_close_commit_a_manual_assignment(consumers, topic) -> None:
    """enable.auto.commit works without membership: close() commits the positions reached."""
    c = consumers()
    c.assign([("t", 0)])
    read(c, 5)
    c.close()
    again = consumers(auto_offset_reset="latest")
    again.assign([("t", 0)])
    assert again.committed(("t", 0)) == topic[4]
    assert again.position(("t", 0)) == topic[4]


def test_assign_does_not_keep_a_member_from_a_static_claim(consumers, topic) -> None:
    """Unlike add_topic(topic, partition), assign() claims nothing: a member may claim the same partition."""
    manual = consumers()
    manual.assign([("t", 0)])
    read(manual, 5)
    static = consumers()
    static.add_topic("t", 0)
    assert len(read(static, 5)) == 5
    assert static.assignment() == {("t", 0)} and manual.assignment() == {("t", 0)}


def test_without_a_group_assign_reads_and_commits_are_refused(broker, topic) -> None:
    """No group.id: assign() reads from auto.offset.reset; commit() and committed() raise IllegalStateError."""
    with Consumer(bootstrap_servers=broker.address, fetch_max_wait_ms=100) as c:
        c.assign([("t", 1)])
        assert values(read(c, 5)) == [f"b{i}".encode() for i in range(5)]
        with pytest.raises(IllegalStateError):
            c.commit()
        with pytest.raises(IllegalStateError):
            c.committed(("t", 1))
