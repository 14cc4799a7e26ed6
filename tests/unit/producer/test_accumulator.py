"""The accumulator: batching by size and by linger, buffer accounting and blocking, unassigned topics."""

from __future__ import annotations

import threading
import time

import pytest

from rill.client.clock import FakeClock
from rill.client.errors import WrongPartition
from rill.client.producer.accumulator import RecordAccumulator, encoded_ends
from rill.client.producer.errors import BufferFull, ProducerClosed
from rill.client.producer.future import MESSAGE_OVERHEAD
from rill.client.producer.partitioner import DefaultPartitioner

NODE = "broker-0"
PAYLOAD = b"x" * 90  # 100 bytes encoded


def make(clock: FakeClock | None = None, *, partitions: int = 1, **settings: float) -> RecordAccumulator:
    options = {"batch_size": 1000, "linger": 0.005, "buffer_memory": 1 << 20, "max_block": 0.1,
               "request_timeout": 30.0, **settings}
    acc = RecordAccumulator(batch_size=int(options["batch_size"]), linger=options["linger"],
                            buffer_memory=int(options["buffer_memory"]), max_block=options["max_block"],
                            request_timeout=options["request_timeout"], partitioner=DefaultPartitioner(),
                            clock=clock or FakeClock(100.0))
    acc.assign("t", partitions)
    return acc


def drain(acc: RecordAccumulator, now: float, budget: int = 1 << 30):  # type: ignore[no-untyped-def]
    return acc.drain(now, lambda topic, partition: NODE, {NODE: budget})


def test_full_batch_is_ready_before_linger() -> None:
    """A batch that reached batch.size is sent at once; the partial one behind it waits for linger."""
    clock = FakeClock(100.0)
    acc = make(clock, linger=10.0)
    for _ in range(15):
        acc.append(acc.topics["t"], 0, PAYLOAD)
    taken, stuck, next_check = drain(acc, clock.now)
    assert [len(b.payloads) for b in taken[NODE]] == [10]
    assert stuck == [] and next_check == clock.now + 10.0


def test_partial_batch_waits_for_linger() -> None:
    """A partial batch is not ready until linger has passed since its first message."""
    clock = FakeClock(100.0)
    acc = make(clock, linger=0.005)
    acc.append(acc.topics["t"], 0, PAYLOAD)
    taken, _, next_check = drain(acc, clock.now)
    assert taken == {} and next_check == pytest.approx(clock.now + 0.005)
    clock.now += 0.005
    taken, _, next_check = drain(acc, clock.now)
    assert [len(b.payloads) for b in taken[NODE]] == [1] and next_check == float("inf")


def test_message_larger_than_batch_size_gets_its_own_batch() -> None:
    """A message over batch.size is sent alone, and the open batch before it keeps its messages."""
    clock = FakeClock(100.0)
    acc = make(clock)
    state = acc.topics["t"]
    acc.append(state, 0, PAYLOAD)
    acc.append(state, 0, b"y" * 5000)
    acc.append(state, 0, PAYLOAD)
    taken, _, _ = drain(acc, clock.now + 1)
    assert [len(b.payloads) for b in taken[NODE]] == [1, 1, 1]
    assert [b.size for b in taken[NODE]] == [100, 5000 + MESSAGE_OVERHEAD, 100]


def test_send_many_fills_batches_in_order() -> None:
    """Many messages split into batches of at most batch.size bytes, in order, in one response."""
    clock = FakeClock(100.0)
    acc = make(clock)
    payloads = [bytes([i]) * 90 for i in range(25)]
    response = acc.append_many(acc.topics["t"], 0, payloads, encoded_ends(payloads))
    taken, _, _ = drain(acc, clock.now + 1)
    assert [b.payloads for b in taken[NODE]] == [payloads[:10], payloads[10:20], payloads[20:]]
    assert len(response) == 25 and [count for _, _, count in response._parts()] == [10, 10, 5]


def test_drain_respects_the_node_budget() -> None:
    """A busy node (no budget) gets nothing; a node takes batches until its budget is spent."""
    clock = FakeClock(100.0)
    acc = make(clock)
    for _ in range(30):
        acc.append(acc.topics["t"], 0, PAYLOAD)
    taken, _, _ = drain(acc, clock.now, budget=0)
    assert taken == {}
    taken, _, _ = drain(acc, clock.now, budget=1500)
    assert len(taken[NODE]) == 2


def test_no_route_means_stuck_and_expiry_takes_late_batches() -> None:
    """Ready batches without a leader are reported stuck; past their deadline they are expired."""
    clock = FakeClock(100.0)
    acc = make(clock, request_timeout=1.0)
    acc.append(acc.topics["t"], 0, PAYLOAD)
    taken, stuck, _ = acc.drain(clock.now + 1, lambda t, p: None, {})
    assert taken == {} and len(stuck) == 1
    assert acc.expire(stuck[0], clock.now + 0.5) == []
    assert len(acc.expire(stuck[0], clock.now + 2)) == 1


def test_buffer_counts_encoded_bytes_until_release() -> None:
    """Each queued message holds MESSAGE_OVERHEAD + its size of buffer.memory until its batch is released."""
    clock = FakeClock(100.0)
    acc = make(clock)
    acc.append(acc.topics["t"], 0, b"12345")
    acc.append(acc.topics["t"], 0, b"")
    assert acc.used == 5 + 2 * MESSAGE_OVERHEAD
    taken, _, _ = drain(acc, clock.now + 1)
    assert acc.used == 5 + 2 * MESSAGE_OVERHEAD  # in flight still counts
    for batch in taken[NODE]:
        acc.release(batch, batch.size)
    assert acc.used == 0


def test_full_buffer_blocks_for_max_block_then_raises() -> None:
    """With buffer.memory used up, append waits max.block and then raises BufferFull."""
    acc = make(buffer_memory=250, max_block=0.2)
    acc.append(acc.topics["t"], 0, PAYLOAD)
    acc.append(acc.topics["t"], 0, PAYLOAD)
    started = time.monotonic()
    with pytest.raises(BufferFull, match="max.block.ms=200"):
        acc.append(acc.topics["t"], 0, PAYLOAD)
    assert time.monotonic() - started >= 0.19
    assert acc.used == 200


def test_blocked_append_proceeds_when_room_is_released() -> None:
    """A blocked append continues as soon as a completed batch gives its bytes back."""
    clock = FakeClock(100.0)
    acc = make(clock, buffer_memory=200, max_block=5.0)
    acc.append(acc.topics["t"], 0, PAYLOAD)
    acc.append(acc.topics["t"], 0, PAYLOAD)
    taken, _, _ = drain(acc, clock.now + 1)
    threading.Timer(0.05, lambda: [acc.release(b, b.size) for b in taken[NODE]]).start()
    started = time.monotonic()
    acc.append(acc.topics["t"], 0, PAYLOAD)
    assert time.monotonic() - started < 4
    assert acc.used == 100


def test_flush_makes_partial_batches_ready() -> None:
    """While a flush is in progress, batches are sent without waiting for linger."""
    clock = FakeClock(100.0)
    acc = make(clock, linger=60.0)
    acc.append(acc.topics["t"], 0, PAYLOAD)
    pending = acc.begin_flush()
    taken, _, _ = drain(acc, clock.now)
    acc.end_flush()
    assert taken[NODE] == pending


def test_requeue_puts_batches_back_in_front_in_order() -> None:
    """Batches put back for a retry go before newer ones, in their original order."""
    clock = FakeClock(100.0)
    acc = make(clock)
    payloads = [bytes([i]) * 90 for i in range(30)]
    acc.append_many(acc.topics["t"], 0, payloads, encoded_ends(payloads))
    taken, _, _ = drain(acc, clock.now + 1, budget=1500)
    acc.requeue(taken[NODE])
    again, _, _ = drain(acc, clock.now + 1)
    assert [b.payloads[0] for b in again[NODE]] == [payloads[0], payloads[10], payloads[20]]


def test_unassigned_messages_are_partitioned_in_order_once_known() -> None:
    """Messages sent before the partition count was known go, in order, where the partitioner says."""
    clock = FakeClock(100.0)
    acc = make(clock)
    keyed = acc.append_unassigned("new", [b"k1"], encoded_ends([b"k1"]), b"user-1", None)
    fixed = acc.append_unassigned("new", [b"a", b"b"], encoded_ends([b"a", b"b"]), None, 2)
    assert acc.unassigned() == {"new": clock.now} and keyed.partition is None
    acc.assign("new", 7)
    assert acc.unassigned() == {}
    assert keyed.partition == DefaultPartitioner()("new", b"user-1", 7) and fixed.partition == 2
    taken, _, _ = drain(acc, clock.now + 1)
    assert sorted(b.payloads for b in taken[NODE]) == [[b"a", b"b"], [b"k1"]]


def test_unassigned_message_for_a_missing_partition_fails() -> None:
    """An explicit partition beyond the count learned later fails with WrongPartition and frees its bytes."""
    acc = make()
    response = acc.append_unassigned("new", [b"x"], encoded_ends([b"x"]), None, 5)
    acc.assign("new", 2)
    assert isinstance(response.get_error(timeout=1), WrongPartition)
    assert acc.used == 0


def test_failing_an_unassigned_topic_fails_its_messages() -> None:
    """fail_unassigned completes every waiting response with the error and frees their bytes."""
    acc = make()
    responses = [acc.append_unassigned("gone", [b"x"], encoded_ends([b"x"]), None, None) for _ in range(3)]
    for callback in acc.fail_unassigned("gone", WrongPartition("nope"), forget=True):
        callback()
    assert all(isinstance(r.get_error(timeout=1), WrongPartition) for r in responses)
    assert acc.used == 0 and "gone" not in acc.topics


def test_closed_accumulator_refuses_appends() -> None:
    """After close, appends raise ProducerClosed."""
    acc = make()
    acc.close()
    with pytest.raises(ProducerClosed):
        acc.append(acc.topics["t"], 0, PAYLOAD)
