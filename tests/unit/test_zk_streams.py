"""Ownership and delivery of the ZooKeeper consumer's stream buffers (rill.client.zookeeper.streams)."""

from __future__ import annotations

import threading

import pytest

from rill.client.zookeeper.streams import Chunk, OwnedPartition, PartitionKey, StreamBuffers, ZkRecord

P0 = PartitionKey("t", 0, 0)
P1 = PartitionKey("t", 1, 0)


def records(key: PartitionKey, start: int, n: int, size: int = 10) -> list[ZkRecord]:
    return [ZkRecord(key.topic, key.broker_id, key.partition, start + i * size, start + (i + 1) * size,
                     f"{key.name}@{start + i * size}".encode()) for i in range(n)]


def owning(buffers: StreamBuffers, *keys: PartitionKey) -> int:
    generation = buffers.assign({k: OwnedPartition(i % buffers.streams, f"c-{i}", 0, 0) for i, k in enumerate(keys)},
                                buffers.epoch)
    assert generation is not None
    return generation


def never() -> bool:
    return False


def test_take_advances_the_consumed_offset() -> None:
    """Taking records moves the partition's consumed offset to the last record's next offset."""
    buffers = StreamBuffers(2, 10)
    gen = owning(buffers, P0, P1)
    assert buffers.put(Chunk(gen, P0, records(P0, 0, 3)), never)
    assert buffers.put(Chunk(gen, P1, records(P1, 0, 2)), never)
    assert [r.offset for r in buffers.take(0, 0, 2)] == [0, 10]
    assert buffers.owned()[P0].consumed == 20
    assert len(buffers.take(None, 0, 10)) == 3
    assert buffers.owned()[P0].consumed == 30 and buffers.owned()[P1].consumed == 20


def test_nothing_is_delivered_after_revoke() -> None:
    """revoke() returns the consumed offsets, and chunks fetched before or after it are never delivered."""
    buffers = StreamBuffers(1, 10)
    gen = owning(buffers, P0)
    buffers.put(Chunk(gen, P0, records(P0, 0, 3)), never)
    assert len(buffers.take(None, 0, 1)) == 1
    owned = buffers.revoke()
    assert owned[P0].consumed == 10
    assert buffers.take(None, 0, 10) == []
    assert not buffers.put(Chunk(gen, P0, records(P0, 10, 1)), never)  # a late fetch of the old generation
    assert buffers.owned() == {}


def test_a_lost_session_voids_an_assignment_computed_before_it() -> None:
    """An assignment computed before a session loss is refused: its claims died with the session."""
    buffers = StreamBuffers(1, 10)
    epoch = buffers.epoch
    buffers.lose()
    assert buffers.assign({P0: OwnedPartition(0, "c-0", 0, 0)}, epoch) is None
    assert buffers.owned() == {}


def test_paused_delivery_holds_records_until_resumed() -> None:
    """While paused nothing is delivered; resumed, the buffered records are."""
    buffers = StreamBuffers(1, 10)
    gen = owning(buffers, P0)
    buffers.put(Chunk(gen, P0, records(P0, 0, 2)), never)
    buffers.set_paused(True)
    assert buffers.take(None, 0.05, 10) == []
    buffers.set_paused(False)
    assert len(buffers.take(None, 0, 10)) == 2


def test_a_full_stream_blocks_its_fetcher_until_read_or_revoked() -> None:
    """A fetcher waits while its stream is full, and gives up when the generation is revoked."""
    buffers = StreamBuffers(1, 1)
    gen = owning(buffers, P0)
    assert buffers.put(Chunk(gen, P0, records(P0, 0, 1)), never)
    outcome: list[bool] = []
    putter = threading.Thread(target=lambda: outcome.append(buffers.put(Chunk(gen, P0, records(P0, 10, 1)), never)))
    putter.start()
    putter.join(0.2)
    assert putter.is_alive()  # waiting for room
    buffers.revoke()
    putter.join(5)
    assert outcome == [False]


def test_errors_are_raised_once_and_close_ends_waits() -> None:
    """A reported fetch error is raised by one take; close() wakes a blocked stream reader."""
    buffers = StreamBuffers(1, 10)
    buffers.fail(ValueError("corrupt"))
    with pytest.raises(ValueError):
        buffers.take(None, 0, 1)
    assert buffers.take(None, 0, 1) == []
    waiter = threading.Thread(target=buffers.take, args=(0, None, 1))
    waiter.start()
    buffers.close()
    waiter.join(5)
    assert not waiter.is_alive()


def test_polling_every_stream_does_not_starve_any() -> None:
    """Takes from every stream start one stream further each time."""
    buffers = StreamBuffers(2, 10)
    gen = owning(buffers, P0, P1)
    for i in range(3):
        buffers.put(Chunk(gen, P0, records(P0, i * 100, 5)), never)
        buffers.put(Chunk(gen, P1, records(P1, i * 100, 5)), never)
    first, second = buffers.take(None, 0, 5), buffers.take(None, 0, 5)
    assert {r.broker_id for r in first} != {r.broker_id for r in second}
