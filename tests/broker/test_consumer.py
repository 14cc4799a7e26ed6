"""The poll() consumer against a real in-process broker and its gRPC group coordinator."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from rill.broker.testing import RunningBroker, running_broker
from rill.client.grpc_client import AdminClient
from rill.client.consumer import (CommitFailed, Consumer, IllegalStateError, MemberEvicted, NoOffsetForPartition,
                                  RewindFailed, TopicPartition)
from rill.client.errors import CorruptMessageError, InvalidOffset, OffsetOutOfRange
from rill.client.protocol.messages import CODEC_GZIP, Message
from rill.client.simple import SimpleConsumer, SimpleProducer
from tests.broker.group_consumers import HEARTBEAT_MS, SESSION_MS, consumer_factory, short_session_broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with short_session_broker(tmp_path, partitions=2) as b:
        yield b


@pytest.fixture
def consumers(broker: RunningBroker) -> Iterator[Callable[..., Consumer]]:
    yield from consumer_factory(broker)


def create_topic(broker: RunningBroker, topic: str, partitions: int) -> None:
    with SimpleConsumer(broker.host, broker.port, timeout=10) as client:
        client.create_topic(topic, partitions)


def produce(broker: RunningBroker, topic: str, partition: int, payloads: Sequence[bytes], codec: int = 0) -> int:
    """Append and return the offset after the last message."""
    with SimpleProducer(broker.host, broker.port, timeout=10, codec=codec) as producer:
        return producer.send(topic, list(payloads), partition).next_offset


def poll_until(consumers: Sequence[Consumer], done: Callable[[], bool], timeout: float = 15.0,
               into: dict[int, list[Message]] | None = None) -> dict[int, list[Message]]:
    """Poll every consumer in turn (short polls) until ``done()``; messages by consumer index."""
    got = into if into is not None else {i: [] for i in range(len(consumers))}
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out; got {({i: len(m) for i, m in got.items()})}"
        for i, consumer in enumerate(consumers):
            got.setdefault(i, []).extend(consumer.poll(0.02))
    return got


def values(messages: Sequence[Message]) -> list[bytes]:
    return [m.value for m in messages]


def numbered(n: int, prefix: str = "m") -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


# ---------------------------------------------------------------- poll


def test_poll_returns_produced_messages_in_order_per_partition(broker: RunningBroker, consumers) -> None:
    """Every produced message comes back once, in offset order within its partition, with its offsets."""
    create_topic(broker, "t", 2)
    produce(broker, "t", 0, numbered(300, "a"))
    end1 = produce(broker, "t", 1, numbered(200, "b"))
    c = consumers(max_poll_records=64)
    c.add_topic("t")
    messages: list[Message] = []
    deadline = time.monotonic() + 10
    while len(messages) < 500:
        batch = c.poll(0.5)
        assert len(batch) <= 64
        messages += batch
        assert time.monotonic() < deadline
    by_partition = {p: [m for m in messages if m.partition == p] for p in (0, 1)}
    assert values(by_partition[0]) == numbered(300, "a")
    assert values(by_partition[1]) == numbered(200, "b")
    for ms in by_partition.values():
        assert all(a.next_offset == b.offset for a, b in zip(ms, ms[1:]))
    assert by_partition[1][-1].next_offset == end1
    assert c.poll(0.05) == []
    assert c.assignment() == {TopicPartition("t", 0), TopicPartition("t", 1)}
    assert c.position(("t", 1)) == end1


def test_poll_returns_new_messages_from_a_long_poll(broker: RunningBroker, consumers) -> None:
    """A message produced while poll() waits is returned by that poll, well before its timeout."""
    create_topic(broker, "t", 1)
    c = consumers()
    c.add_topic("t")
    assert c.poll(0.3) == []
    produce(broker, "t", 0, [b"late"])
    started = time.monotonic()
    assert values(c.poll(5.0)) == [b"late"]
    assert time.monotonic() - started < 2.0


def test_poll_respects_its_timeout_while_the_group_rebalances(broker: RunningBroker, consumers) -> None:
    """While RegisterConsumer waits for another member to re-register, poll() still returns by its timeout."""
    create_topic(broker, "t", 2)
    a = consumers(session_timeout_ms=3000, heartbeat_interval_ms=1000)
    a.add_topic("t")
    poll_until([a], lambda: len(a.assignment()) == 2)
    b = consumers(session_timeout_ms=3000, heartbeat_interval_ms=1000)
    b.add_topic("t")
    for _ in range(3):  # `a` is not polled, so the rebalance cannot complete yet
        started = time.monotonic()
        assert b.poll(0.1) == []
        assert time.monotonic() - started < 0.5
    poll_until([a, b], lambda: len(a.assignment()) == 1 and len(b.assignment()) == 1)


def test_one_long_poll_keeps_heartbeating(broker: RunningBroker, consumers) -> None:
    """A single poll() longer than the session timeout heartbeats from inside its wait: no eviction."""
    create_topic(broker, "t", 1)
    c = consumers(session_timeout_ms=500, heartbeat_interval_ms=100)
    c.add_topic("t")
    poll_until([c], lambda: len(c.assignment()) == 1)
    generation = c.generation
    started = time.monotonic()
    assert c.poll(1.5) == []
    assert time.monotonic() - started >= 1.5
    assert c.poll(0) == [] and c.generation == generation and c.metrics()["heartbeats"] >= 10


def test_metrics_report_positions_and_lag(broker: RunningBroker, consumers) -> None:
    """metrics() gives each owned partition's position, committed offset, end offset and lag in bytes."""
    create_topic(broker, "t", 1)
    end = produce(broker, "t", 0, numbered(3))
    c = consumers(max_poll_records=1)
    c.add_topic("t")
    first = poll_until([c], lambda: bool(first.get(0)), into=(first := {}))[0]
    stats = c.metrics()
    assert stats["partitions"]["t-0"] == {"position": first[0].next_offset, "committed": None, "end_offset": end,
                                          "lag": end - first[0].next_offset}
    assert stats["records_returned"] == 1 and stats["rebalances"] == 1


def test_value_and_key_deserializers(broker: RunningBroker, consumers) -> None:
    """value.deserializer is applied to every value."""
    create_topic(broker, "t", 1)
    produce(broker, "t", 0, [b"1", b"2"])
    c = consumers(value_deserializer=lambda v: int(v))
    c.add_topic("t")
    got = poll_until([c], lambda: len(got.get(0, [])) == 2, into=(got := {}))
    assert [m.value for m in got[0]] == [1, 2]


def test_gzip_messages_round_trip(broker: RunningBroker, consumers) -> None:
    """Messages produced in a gzip wrapper come back one by one; the last carries the wrapper's end."""
    create_topic(broker, "t", 1)
    end = produce(broker, "t", 0, numbered(50), codec=CODEC_GZIP)
    produce(broker, "t", 0, [b"plain"])
    c = consumers()
    c.add_topic("t")
    got = poll_until([c], lambda: len(got.get(0, [])) == 51, into=(got := {}))
    assert values(got[0]) == numbered(50) + [b"plain"]
    assert got[0][49].next_offset == end and all(m.next_offset == 0 for m in got[0][:49])
    c.commit()
    assert c.committed(("t", 0)) == got[0][-1].next_offset


def test_a_corrupt_message_is_never_delivered(broker: RunningBroker, consumers, tmp_path: Path) -> None:
    """Messages before a corrupt one are returned; then poll() raises CorruptMessageError until a seek."""
    create_topic(broker, "t", 1)
    produce(broker, "t", 0, [b"good-1", b"good-2", b"payload-to-corrupt", b"after"])
    segment = tmp_path / "data" / "t-0" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    bad_at = len(data) - (4 + 6 + len(b"after")) - 3  # a byte of the third message's payload
    data[bad_at] ^= 0x40
    with open(segment, "r+b") as f:
        f.write(bytes(data))
    c = consumers(group_id=None)
    c.add_topic("t", 0)
    with capture_logs() as logs:
        got = poll_until([c], lambda: len(got.get(0, [])) == 2, into=(got := {}))
        assert values(got[0]) == [b"good-1", b"good-2"]
        for _ in range(2):
            with pytest.raises(CorruptMessageError, match="offset"):
                c.poll(0.1)
    assert "consumer.corrupt_message" in [e["event"] for e in logs]
    bad_offset = got[0][-1].next_offset
    assert c.position(("t", 0)) == bad_offset
    c.seek("t", 0, bad_offset + 4 + 6 + len(b"payload-to-corrupt"))  # skip it
    assert values(poll_until([c], lambda: len(got[0]) == 3, into=got)[0][2:]) == [b"after"]


# ---------------------------------------------------------------- groups and rebalances


def test_two_consumers_split_partitions_and_rebalance_on_join_and_close(broker: RunningBroker, consumers) -> None:
    """A second member takes half the partitions; when it closes, the first takes them all back at once."""
    create_topic(broker, "t", 4)
    a = consumers()
    a.add_topic("t")
    poll_until([a], lambda: len(a.assignment()) == 4)
    generation = a.generation
    b = consumers()
    b.add_topic("t")
    poll_until([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2)
    assert a.assignment().isdisjoint(b.assignment())
    assert a.generation == b.generation > generation
    for p in range(4):
        produce(broker, "t", p, [f"p{p}".encode()])
    got = poll_until([a, b], lambda: sum(map(len, got.values())) == 4, into=(got := {}))
    assert {m.partition for m in got[0]} == {tp.partition for tp in a.assignment()}
    started = time.monotonic()
    b.close()  # LeaveGroup: no need to wait for b's session to expire
    poll_until([a], lambda: len(a.assignment()) == 4)
    assert time.monotonic() - started < SESSION_MS / 1000


def test_an_evicted_member_is_told_once_and_rejoins(broker: RunningBroker, consumers) -> None:
    """A member that stops polling past its session timeout loses its partitions to the others; its
    commit fails with CommitFailed, its next poll raises MemberEvicted once, and then it rejoins."""
    create_topic(broker, "t", 2)
    produce(broker, "t", 0, [b"x"])
    produce(broker, "t", 1, [b"y"])
    a = consumers(session_timeout_ms=500)
    b = consumers(session_timeout_ms=500)
    a.add_topic("t")
    b.add_topic("t")
    got = poll_until([a, b], lambda: sum(map(len, got.values())) == 2 and len(a.assignment()) == 1,
                     into=(got := {}))
    lost = a.assignment()
    old_generation = a.generation
    poll_until([b], lambda: len(b.assignment()) == 2)  # only b polls: a's session expires
    with capture_logs() as logs:
        with pytest.raises(CommitFailed) as failed:
            a.commit(offsets={next(iter(lost)): 0})
        with pytest.raises(MemberEvicted) as evicted:
            a.poll(0.1)
    assert failed.value.code_name == "UNKNOWN_MEMBER"
    assert set(failed.value.partitions) == lost
    assert evicted.value.group == "g" and evicted.value.generation == old_generation
    assert set(evicted.value.partitions) == lost
    assert "consumer.evicted" in [e["event"] for e in logs]
    poll_until([a, b], lambda: len(a.assignment()) == 1 and len(b.assignment()) == 1)


def test_eviction_is_noticed_locally_after_a_long_pause(broker: RunningBroker, consumers) -> None:
    """A poll() after more than the session timeout raises MemberEvicted at once, naming group and generation."""
    create_topic(broker, "t", 1)
    a = consumers(session_timeout_ms=300, heartbeat_interval_ms=50)
    a.add_topic("t")
    poll_until([a], lambda: len(a.assignment()) == 1)
    time.sleep(0.5)
    with pytest.raises(MemberEvicted, match=r"group 'g'.*generation 1.*poll\(\) was not called often enough"):
        a.poll(0)
    poll_until([a], lambda: len(a.assignment()) == 1)
    assert a.generation > 1


def test_commit_for_a_partition_not_owned_fails_clearly(broker: RunningBroker, consumers) -> None:
    """A commit naming another member's partition is refused whole: CommitFailed with NOT_OWNER for it."""
    create_topic(broker, "t", 2)
    a, b = consumers(), consumers()
    a.add_topic("t")
    b.add_topic("t")
    poll_until([a, b], lambda: len(a.assignment()) == 1 and len(b.assignment()) == 1)
    mine, theirs = next(iter(a.assignment())), next(iter(b.assignment()))
    with pytest.raises(CommitFailed) as failed:
        a.commit(offsets={mine: 0, theirs: 0})
    assert failed.value.partitions == {mine: "NONE", theirs: "NOT_OWNER"}
    assert "NOT_OWNER" in str(failed.value)
    with pytest.raises(IllegalStateError, match="not assigned"):
        a.commit(theirs.topic, theirs.partition)


# ---------------------------------------------------------------- commits and positions


def test_commit_committed_and_position(broker: RunningBroker, consumers) -> None:
    """commit() stores each position; committed() reads it back; a new member of the group starts there."""
    create_topic(broker, "t", 1)
    produce(broker, "t", 0, numbered(10))
    c = consumers(enable_auto_commit=False, max_poll_records=4)
    c.add_topic("t")
    got = poll_until([c], lambda: len(got.get(0, [])) >= 4, into=(got := {}))
    assert c.committed(("t", 0)) is None
    assert c.position(("t", 0)) == got[0][-1].next_offset
    c.commit("t", 0)
    assert c.committed(("t", 0)) == got[0][-1].next_offset
    c.commit(offsets={("t", 0): got[0][1].next_offset})
    assert c.committed(("t", 0)) == got[0][1].next_offset
    c.close()
    d = consumers(enable_auto_commit=False)
    d.add_topic("t")
    rest = poll_until([d], lambda: len(rest.get(0, [])) == 8, into=(rest := {}))
    assert values(rest[0]) == numbered(10)[2:]


def test_commit_of_a_bad_offset_is_refused(broker: RunningBroker, consumers) -> None:
    """An offset that is not a message boundary is refused with INVALID_OFFSET."""
    create_topic(broker, "t", 1)
    produce(broker, "t", 0, numbered(3))
    c = consumers()
    c.add_topic("t")
    poll_until([c], lambda: len(c.assignment()) == 1)
    with pytest.raises(CommitFailed) as failed:
        c.commit(offsets={("t", 0): 3})
    assert failed.value.code_name == "INVALID_OFFSET"


def test_auto_commit_commits_the_previous_polls_offsets(broker: RunningBroker, consumers) -> None:
    """An auto-commit inside poll() stores the position after the messages earlier polls returned,
    never those the same poll returns."""
    create_topic(broker, "t", 1)
    produce(broker, "t", 0, numbered(20))
    c = consumers(auto_commit_interval_ms=1, max_poll_records=5)
    c.add_topic("t")
    first = poll_until([c], lambda: len(first.get(0, [])) >= 5, into=(first := {}))[0]
    assert len(first) == 5
    assert (c.committed(("t", 0)) or 0) <= first[0].offset  # the poll that returned them did not commit them
    time.sleep(0.01)
    second = c.poll(1.0)
    assert len(second) == 5
    assert c.committed(("t", 0)) == first[-1].next_offset
    c.close()  # close commits everything returned
    admin = AdminClient(broker.grpc_address)
    try:
        assert admin.fetch_offsets("g", [("t", 0)]).offsets[0].offset == second[-1].next_offset
    finally:
        admin.close()


def test_auto_commit_before_a_rebalance_hands_over_without_duplicates(broker: RunningBroker, consumers) -> None:
    """With auto-commit, a member commits before re-registering, so the next owner starts where it stopped."""
    create_topic(broker, "t", 2)
    produce(broker, "t", 0, numbered(5, "a"))
    produce(broker, "t", 1, numbered(5, "b"))
    a = consumers(auto_commit_interval_ms=60_000)
    a.add_topic("t")
    got = poll_until([a], lambda: len(got.get(0, [])) == 10, into=(got := {}))
    b = consumers(auto_commit_interval_ms=60_000)
    b.add_topic("t")
    poll_until([a, b], lambda: len(a.assignment()) == 1 and len(b.assignment()) == 1, into=got)
    produce(broker, "t", 0, [b"a-new"])
    produce(broker, "t", 1, [b"b-new"])
    poll_until([a, b], lambda: sum(map(len, got.values())) == 12, into=got)
    assert sorted(values(got[0][10:] + got[1])) == [b"a-new", b"b-new"]


def test_static_partitions_are_never_handed_to_others(broker: RunningBroker, consumers) -> None:
    """add_topic(topic, partition) claims that partition; the group divides only the rest."""
    create_topic(broker, "t", 3)
    a, b = consumers(), consumers()
    a.add_topic("t", 2)
    b.add_topic("t")
    poll_until([a, b], lambda: a.assignment() == {("t", 2)} and b.assignment() == {("t", 0), ("t", 1)})
    c = consumers()
    c.add_topic("t")
    poll_until([a, b, c], lambda: len(b.assignment()) == 1 and len(c.assignment()) == 1
               and a.assignment() == {("t", 2)})
    produce(broker, "t", 2, [b"static"])
    got = poll_until([a, b, c], lambda: bool(got.get(0)), into=(got := {}))
    assert values(got[0]) == [b"static"]
    a.commit()
    assert a.committed(("t", 2)) == got[0][0].next_offset


def test_a_consumer_without_a_group_reads_static_partitions_and_cannot_commit(broker: RunningBroker,
                                                                           consumers) -> None:
    """Without group.id: static partitions from auto.offset.reset; commits and group topics are refused."""
    create_topic(broker, "t", 2)
    produce(broker, "t", 1, [b"old"])
    c = consumers(group_id=None, auto_offset_reset="latest")
    c.add_topic("t", 1)
    assert c.poll(0.2) == []
    produce(broker, "t", 1, [b"new"])
    got = poll_until([c], lambda: bool(got.get(0)), into=(got := {}))
    assert values(got[0]) == [b"new"]
    with pytest.raises(IllegalStateError, match="group.id"):
        c.commit()
    with pytest.raises(IllegalStateError, match="group.id"):
        c.add_topic("t")


def test_subscribe_by_pattern_picks_up_new_topics(broker: RunningBroker, consumers) -> None:
    """subscribe(pattern=...) consumes every matching topic, including one created later."""
    create_topic(broker, "orders-eu", 1)
    create_topic(broker, "audit", 1)
    c = consumers(metadata_max_age_ms=100)
    c.subscribe(pattern=r"orders-.*")
    poll_until([c], lambda: c.assignment() == {("orders-eu", 0)})
    create_topic(broker, "orders-us", 1)
    produce(broker, "orders-us", 0, [b"us"])
    got = poll_until([c], lambda: bool(got.get(0)), into=(got := {}))
    assert values(got[0]) == [b"us"]
    assert c.subscription() == {"orders-eu", "orders-us"}


def poll_for(consumer: Consumer, seconds: float) -> list[Message]:
    """Everything ``consumer`` returns from short polls over ``seconds``."""
    got: list[Message] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got += consumer.poll(0.05)
    return got


def test_remove_topic_gives_up_its_partitions_and_keeps_the_others(broker: RunningBroker, consumers) -> None:
    """remove_topic(topic) rebalances without the topic: its partitions leave the assignment, the
    subscription no longer names it, and poll() returns nothing from it; the other topic goes on."""
    create_topic(broker, "kept", 1)
    create_topic(broker, "dropped", 2)
    c = consumers()
    c.add_topic("kept")
    c.add_topic("dropped")
    poll_until([c], lambda: c.assignment() == {("kept", 0), ("dropped", 0), ("dropped", 1)})
    generation = c.generation
    c.remove_topic("dropped")
    poll_until([c], lambda: c.assignment() == {("kept", 0)})
    assert c.subscription() == {"kept"} and c.generation > generation
    for p in (0, 1):
        produce(broker, "dropped", p, [b"not for c"])
    produce(broker, "kept", 0, [b"for c"])
    got = poll_until([c], lambda: bool(got.get(0)), into=(got := {}))
    got[0] += poll_for(c, 0.5)
    assert values(got[0]) == [b"for c"]
    c.remove_topic("never-added")  # not subscribed: nothing changes
    assert c.subscription() == {"kept"}


def test_remove_topic_with_a_partition_releases_that_static_partition(broker: RunningBroker, consumers) -> None:
    """remove_topic(topic, partition) stops reading a static partition at once (no group) and
    leaves the other static partition of the topic alone."""
    create_topic(broker, "t", 2)
    c = consumers(group_id=None, auto_offset_reset="earliest")
    c.add_topic("t", 0)
    c.add_topic("t", 1)
    produce(broker, "t", 0, [b"p0-old"])
    produce(broker, "t", 1, [b"p1-old"])
    got = poll_until([c], lambda: len(got.get(0, [])) == 2, into=(got := {}))
    assert sorted(values(got[0])) == [b"p0-old", b"p1-old"]
    c.remove_topic("t", 0)
    assert c.assignment() == {("t", 1)}
    produce(broker, "t", 0, [b"p0-new"])
    produce(broker, "t", 1, [b"p1-new"])
    got = poll_until([c], lambda: bool(got.get(0)), into=(got := {}))
    got[0] += poll_for(c, 0.5)
    assert [(m.partition, m.value) for m in got[0]] == [(1, b"p1-new")]


def test_unsubscribe_drops_topics_pattern_and_static_partitions(broker: RunningBroker, consumers) -> None:
    """After unsubscribe() a member owns and returns nothing; the rest of the group takes its
    partitions over."""
    create_topic(broker, "t", 2)
    create_topic(broker, "s", 1)
    a, b = consumers(metadata_max_age_ms=100), consumers()
    a.subscribe(pattern=r"t")
    a.add_topic("s", 0)
    b.add_topic("t")
    poll_until([a, b], lambda: len(a.assignment()) == 2 and len(b.assignment()) == 1
               and ("s", 0) in a.assignment())
    a.unsubscribe()
    poll_until([a, b], lambda: not a.assignment() and b.assignment() == {("t", 0), ("t", 1)})
    assert a.subscription() == set()
    for p in (0, 1):
        produce(broker, "t", p, [f"t{p}".encode()])
    produce(broker, "s", 0, [b"s0"])
    got = poll_until([a, b], lambda: len(got.get(1, [])) == 2, into=(got := {}))
    got[0] += poll_for(a, 0.5)
    assert got[0] == []
    assert sorted(values(got[1])) == [b"t0", b"t1"]


def test_unsubscribe_without_a_group_stops_reading_at_once(broker: RunningBroker, consumers) -> None:
    create_topic(broker, "t", 1)
    c = consumers(group_id=None, auto_offset_reset="earliest")
    c.add_topic("t", 0)
    produce(broker, "t", 0, [b"read"])
    got = poll_until([c], lambda: bool(got.get(0)), into=(got := {}))
    assert values(got[0]) == [b"read"]
    c.unsubscribe()
    assert c.assignment() == set()
    produce(broker, "t", 0, [b"not read"])
    assert poll_for(c, 0.5) == []


# ---------------------------------------------------------------- seek, pause, reset


def test_seek_and_seek_to_beginning_and_end(broker: RunningBroker, consumers) -> None:
    """seek() moves the position (fetched data is dropped); seek_to_beginning/end reset it."""
    create_topic(broker, "t", 1)
    produce(broker, "t", 0, numbered(5))
    c = consumers()
    c.add_topic("t")
    got = poll_until([c], lambda: len(got.get(0, [])) == 5, into=(got := {}))[0]
    c.seek("t", 0, got[3].offset)
    assert values(c.poll(1.0)) == [b"m3", b"m4"]
    c.seek_to_beginning()
    assert values(c.poll(1.0)) == numbered(5)
    c.seek_to_end(("t", 0))
    assert c.position(("t", 0)) == got[-1].next_offset
    produce(broker, "t", 0, [b"tail"])
    assert values(c.poll(1.0)) == [b"tail"]
    c.seek("t", 0, 1)  # not a message boundary
    with pytest.raises(InvalidOffset):
        c.poll(1.0)
    with pytest.raises(IllegalStateError):
        c.seek("t", 7, 0)


def test_pause_and_resume(broker: RunningBroker, consumers) -> None:
    """A paused partition returns nothing until resumed; the others go on."""
    create_topic(broker, "t", 2)
    c = consumers()
    c.add_topic("t")
    poll_until([c], lambda: len(c.assignment()) == 2)
    c.pause(("t", 0))
    assert c.paused() == {("t", 0)}
    produce(broker, "t", 0, [b"zero"])
    produce(broker, "t", 1, [b"one"])
    assert values(poll_until([c], lambda: bool(got.get(0)), into=(got := {}))[0]) == [b"one"]
    assert c.poll(0.3) == []
    c.resume(("t", 0))
    assert values(c.poll(1.0)) == [b"zero"]


def test_offset_out_of_range_after_retention_resets_and_logs(tmp_path: Path) -> None:
    """When retention deletes the data at the position, the consumer resets by auto.offset.reset and logs it."""
    with running_broker(tmp_path / "data", log_segment_bytes=1024, log_retention_bytes=1024) as b:
        create_topic(b, "t", 1)
        produce(b, "t", 0, [b"x" * 300 for _ in range(3)])
        with Consumer(bootstrap_servers=b.address, auto_offset_reset="earliest") as c:
            c.add_topic("t", 0)
            first = poll_until([c], lambda: len(first.get(0, [])) == 3, into=(first := {}))[0]
            for _ in range(6):
                produce(b, "t", 0, [b"y" * 300 for _ in range(3)])
            c.seek("t", 0, first[0].offset)  # a position retention is about to delete
            assert b.broker.logs.run_retention(time.time()) > 0
            start = c.beginning_offsets([("t", 0)])[("t", 0)]
            assert start > first[-1].next_offset
            with capture_logs() as logs:
                got = poll_until([c], lambda: bool(got.get(0)), into=(got := {}))[0]
            assert got[0].offset == start
            events = [e for e in logs if e["event"] == "consumer.offset_out_of_range"]
            assert events and events[0]["offset"] == first[0].offset and events[0]["reset"] == "earliest"
        with Consumer(bootstrap_servers=b.address, auto_offset_reset="none") as strict:
            strict.add_topic("t", 0)
            with pytest.raises(NoOffsetForPartition):
                strict.poll(0.1)
            strict.seek("t", 0, first[0].offset)
            with pytest.raises(OffsetOutOfRange):
                poll_until([strict], lambda: False, timeout=5)


# ---------------------------------------------------------------- rewind


def test_rewind_of_a_live_group_by_offset_reaches_every_owner(broker: RunningBroker, consumers) -> None:
    """rewind_offsets() moves both members' partitions; each re-reads from the new offset."""
    create_topic(broker, "t", 2)
    produce(broker, "t", 0, numbered(5, "a"))
    produce(broker, "t", 1, numbered(5, "b"))
    a, b = consumers(), consumers()
    a.add_topic("t")
    b.add_topic("t")
    got = poll_until([a, b], lambda: sum(map(len, got.values())) == 10 and len(a.assignment()) == 1,
                     into=(got := {}))
    a.commit()
    b.commit()
    third = {m.partition: m.offset for m in got[0] + got[1] if m.value in (b"a3", b"b3")}
    moved = a.rewind_offsets([("t", 0, third[0]), ("t", 1, third[1])])
    assert moved == {("t", 0): third[0], ("t", 1): third[1]}
    again: dict[int, list[Message]] = {}
    poll_until([a, b], lambda: sum(map(len, again.values())) == 4, into=again)
    assert sorted(values(again[0] + again[1])) == [b"a3", b"a4", b"b3", b"b4"]
    assert len(again[0]) == 2 and len(again[1]) == 2  # each owner re-read its own partition
    with pytest.raises(RewindFailed) as failed:
        a.rewind_offsets([("t", 0, 1)])
    assert failed.value.code_name == "INVALID_OFFSET"


def test_rewind_to_time(broker: RunningBroker, consumers) -> None:
    """rewind_to_time() moves the group to the first message appended at or after the time."""
    create_topic(broker, "t", 1)
    produce(broker, "t", 0, numbered(3, "old"))
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    produce(broker, "t", 0, numbered(2, "new"))
    c = consumers()
    c.add_topic("t")
    poll_until([c], lambda: len(got.get(0, [])) == 5, into=(got := {}))
    moved = c.rewind_to_time(cut, topics=["t"])
    assert list(moved) == [("t", 0)]
    again = poll_until([c], lambda: len(again.get(0, [])) >= 2, into=(again := {}))[0]
    assert values(again)[-2:] == numbered(2, "new")
    assert again[0].offset <= got[0][3].offset  # to one time-index interval


def test_a_consumer_survives_a_broker_restart(tmp_path: Path) -> None:
    """After the broker (and its coordinator, which keeps no membership) restarts, the consumer reconnects,
    poll() says once that the membership was lost, and it rejoins from the committed offsets (so what came
    after the last commit may come again: at-least-once)."""
    data = tmp_path / "data"
    with running_broker(data, group_min_session_timeout_ms=200) as b:
        port, grpc_port = b.port, b.grpc_port
        create_topic(b, "t", 1)
        produce(b, "t", 0, [b"before"])
        c = Consumer(bootstrap_servers=b.address, group_id="g", session_timeout_ms=SESSION_MS,
                     heartbeat_interval_ms=HEARTBEAT_MS, fetch_max_wait_ms=100, retry_backoff_ms=50)
        c.add_topic("t")
        got = poll_until([c], lambda: bool(got.get(0)), into=(got := {}))
        c.commit()
    try:
        with running_broker(data, port=port, grpc_port=grpc_port, group_min_session_timeout_ms=200) as b:
            produce(b, "t", 0, [b"after"])
            evicted = []
            deadline = time.monotonic() + 15
            while not (evicted and c.assignment() and b"after" in values(got[0])):
                assert time.monotonic() < deadline
                try:
                    got[0] += c.poll(0.05)
                except MemberEvicted as exc:
                    evicted.append(exc)
            assert values(got[0])[0] == b"before" and set(values(got[0])[1:]) == {b"after"}
            assert len(evicted) == 1 and evicted[0].code_name == "UNKNOWN_MEMBER"
            produce(b, "t", 0, [b"later"])
            poll_until([c], lambda: values(got[0])[-1] == b"later", into=got)
    finally:
        c.close()


# ---------------------------------------------------------------- rill perf consumer-api / e2e


def test_perf_consumer_api_and_e2e_report_their_figures(broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """Both benchmarks run end to end on small inputs and print JSON figures with the command line."""
    import json

    from rill.client.cli.main import main

    assert main(["perf", "consumer-api", "-b", broker.address, "-t", "bench", "--partitions", "2",
                 "--messages", "5000", "--runs", "2", "--json", "-q"]) == 0
    api = json.loads(capsys.readouterr().out)
    assert api["messages"] == 5000 and len(api["runs"]) == 2 and api["messages_per_s"] > 0
    assert api["command"].startswith("rill perf consumer-api")
    assert main(["perf", "e2e", "-b", broker.address, "-t", "e2e", "--rate", "2000", "--seconds", "0.5",
                 "--warmup", "100", "--runs", "1", "--json", "-q"]) == 0
    e2e = json.loads(capsys.readouterr().out)
    assert e2e["runs"][0]["messages"] == 900 and 0 < e2e["p50_ms"] <= e2e["p99_ms"]
