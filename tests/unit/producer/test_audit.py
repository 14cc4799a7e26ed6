"""Producer audit events: the window/range bookkeeping (fake clocks) and the events a real producer sends."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import structlog

from rill.broker.testing import RunningBroker, running_broker
from rill.client.client_config import ConfigError
from rill.client.producer import Producer
from rill.client.producer.audit_ledger import MAX_RANGES_PER_EVENT, AuditEvent, AuditLedger
from rill.client.simple import SimpleConsumer

T0 = 1_700_000_040.0  # a multiple of 60 s, in seconds since the epoch


class Clocks:
    """A wall clock and a monotonic clock that a test moves together."""

    def __init__(self) -> None:
        self.wall_now = T0
        self.mono_now = 100.0

    def wall(self) -> float:
        return self.wall_now

    def mono(self) -> float:
        return self.mono_now

    def advance(self, seconds: float) -> None:
        self.wall_now += seconds
        self.mono_now += seconds


@pytest.fixture
def clocks() -> Clocks:
    return Clocks()


def ledger(clocks: Clocks, window_ms: int = 60_000) -> AuditLedger:
    return AuditLedger("audit", window_ms, wall=clocks.wall, monotonic=clocks.mono)


def test_batches_count_in_the_window_of_their_send_time(clocks: Clocks) -> None:
    """A batch sent before a window boundary but acknowledged after it counts in the earlier window."""
    book = ledger(clocks)
    sent = clocks.mono_now + 59.9
    clocks.advance(60.2)  # acknowledged in the next window
    book.record("t", 0, 0, 210, 1, sent)
    book.record("t", 0, 210, 420, 1, clocks.mono_now)
    events = book.take_all()
    assert [(e.window_start_ms, e.ranges) for e in events] == [
        (int(T0 * 1000), ((0, 0, 210, 1),)),
        (int(T0 * 1000) + 60_000, ((0, 210, 420, 1),)),
    ]


def test_contiguous_ranges_merge_and_gaps_stay_apart(clocks: Clocks) -> None:
    """Contiguous batches of a partition merge into one range; a gap or another partition starts a new one."""
    book = ledger(clocks)
    now = clocks.mono_now
    book.record("t", 1, 1000, 1100, 2, now)
    book.record("t", 0, 0, 100, 2, now)
    book.record("t", 0, 100, 250, 3, now)
    book.record("t", 0, 400, 500, 1, now)  # another producer wrote 250..400
    book.record("t", 0, 250 - 250, 0, 0, now)  # an empty batch counts nothing
    [event] = book.take_all()
    assert event.ranges == ((0, 0, 250, 5), (0, 400, 500, 1), (1, 1000, 1100, 2))
    assert event.count == 8


def test_out_of_order_acknowledgements_are_merged_when_taken(clocks: Clocks) -> None:
    """Ranges recorded out of order are sorted and merged in the event."""
    book = ledger(clocks)
    now = clocks.mono_now
    book.record("t", 0, 100, 200, 1, now)
    book.record("t", 0, 0, 100, 1, now)
    assert book.take_all()[0].ranges == ((0, 0, 200, 2),)


def test_take_due_waits_for_the_window_end_and_the_grace(clocks: Clocks) -> None:
    """A window's event is due only once the window ended at least grace_ms ago; topics are separate events."""
    book = ledger(clocks, window_ms=1000)
    book.record("a", 0, 0, 50, 1, clocks.mono_now)
    book.record("b", 2, 0, 50, 1, clocks.mono_now)
    clocks.advance(0.99)
    assert book.take_due(grace_ms=200) == []
    clocks.advance(0.1)
    assert book.take_due(grace_ms=200) == []
    clocks.advance(0.15)
    events = book.take_due(grace_ms=200)
    assert [(e.topic, e.window_ms) for e in events] == [("a", 1000), ("b", 1000)]
    assert book.pending() == 0 and book.take_all() == []


def test_late_acknowledgement_makes_a_further_event_for_the_same_window(clocks: Clocks) -> None:
    """Events are additive: an acknowledgement after the window's event went out gives a second event."""
    book = ledger(clocks, window_ms=1000)
    sent = clocks.mono_now
    book.record("t", 0, 0, 50, 1, sent)
    clocks.advance(2)
    first = book.take_due()
    book.record("t", 0, 50, 100, 1, sent)
    second = book.take_due()
    assert [e.window_start_ms for e in first + second] == [int(T0 * 1000)] * 2
    assert [e.ranges for e in first + second] == [((0, 0, 50, 1),), ((0, 50, 100, 1),)]


def test_the_audit_topic_itself_is_not_counted(clocks: Clocks) -> None:
    """Acknowledged audit events are not audited."""
    book = ledger(clocks)
    book.record("audit", 0, 0, 50, 1, clocks.mono_now)
    assert book.take_all() == []


def test_a_window_with_many_ranges_is_split_over_events(clocks: Clocks) -> None:
    """More than MAX_RANGES_PER_EVENT ranges go in several events of the same window."""
    book = ledger(clocks)
    for i in range(MAX_RANGES_PER_EVENT + 3):
        book.record("t", 0, i * 100, i * 100 + 50, 1, clocks.mono_now)
    events = book.take_all()
    assert [len(e.ranges) for e in events] == [MAX_RANGES_PER_EVENT, 3]
    assert {e.window_start_ms for e in events} == {int(T0 * 1000)}


def test_event_json_format() -> None:
    """The event's JSON has the documented fields."""
    event = AuditEvent("t", 1_700_000_040_000, 60_000, ((0, 0, 210, 2), (1, 50, 60, 1)))
    assert json.loads(event.to_json("p1", "host-a")) == {
        "producer": "p1", "host": "host-a", "topic": "t", "window_start_ms": 1_700_000_040_000,
        "window_ms": 60_000, "count": 3, "ranges": [[0, 0, 210, 2], [1, 50, 60, 1]]}


def test_acks_none_cannot_audit() -> None:
    """audit.topic with acks=none is refused: nothing would be acknowledged."""
    with pytest.raises(ConfigError, match="acks=none"):
        Producer({"audit.topic": "audit", "acks": "none", "bootstrap.servers": "127.0.0.1:1"})
    with pytest.raises(ConfigError, match="audit.topic"):
        Producer({"audit.topic": "bad/name", "bootstrap.servers": "127.0.0.1:1"})


def _events(b: RunningBroker, topic: str) -> list[dict[str, object]]:
    out = []
    with SimpleConsumer(b.host, b.port) as c:
        offset, end = c.earliest_offset(topic, 0), c.latest_offset(topic, 0)
        while offset < end:
            messages = c.fetch(topic, 0, offset)
            out.extend(json.loads(m.value) for m in messages)
            offset = messages[-1].next_offset
    return out


@pytest.mark.slow
def test_producer_sends_events_naming_the_acknowledged_offsets(tmp_path: Path) -> None:
    """A real producer's events add up to exactly the acknowledged messages and offsets of each topic."""
    with running_broker(tmp_path / "data", num_partitions=2) as b:
        with SimpleConsumer(b.host, b.port) as c:
            c.create_topic("audit", 1)
        sent: dict[str, list[tuple[int, int]]] = {"t1": [], "t2": []}
        with structlog.testing.capture_logs() as logs:
            with Producer({"bootstrap.servers": b.address, "audit.topic": "audit", "audit.window.ms": 200,
                           "client.id": "p1", "linger.ms": 5}) as producer:
                responses = []
                for i in range(300):
                    topic = "t1" if i % 3 else "t2"
                    responses.append((topic, producer.send(topic, b"x" * (i % 50))))
                    if i == 150:
                        producer.flush()
                        producer.send_many("t1", [b"abc"] * 40, partition=1).get_offsets(10)
                        sent["t1"].extend((1, -1) for _ in range(40))
                for topic, r in responses:
                    offset = r.get_offset(10)  # first: the partition may be known only then
                    assert r.partition is not None
                    sent[topic].append((r.partition, offset))
        events = _events(b, "audit")
    assert not [e for e in logs if e["event"] == "producer.audit_event_failed"]
    assert {e["producer"] for e in events} == {"p1"}
    assert all(e["window_ms"] == 200 and e["window_start_ms"] % 200 == 0 for e in events)  # type: ignore[operator]
    for topic in ("t1", "t2"):
        mine = [e for e in events if e["topic"] == topic]
        assert sum(e["count"] for e in mine) == len(sent[topic])  # type: ignore[misc]
        ranges = [r for e in mine for r in e["ranges"]]  # type: ignore[attr-defined]
        for partition, offset in sent[topic]:
            if offset >= 0:
                assert any(r[0] == partition and r[1] <= offset < r[2] for r in ranges), (topic, partition, offset)
        assert sum(r[3] for r in ranges) == len(sent[topic])
