"""Per-connection memory: the frame decoder's buffers, the request-memory budget and the connection table."""

from __future__ import annotations

import struct

from rill.broker.dataplane.connection_table import ConnectionTable
from rill.broker.dataplane.request_memory import RequestMemory
from rill.broker.dataplane.throttled_log import ThrottledLog
from rill.client.protocol.framing import FrameDecoder

import structlog


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def test_an_idle_decoder_keeps_no_buffer():
    """After whole frames are taken the small buffer is dropped, not kept at its high-water size."""
    decoder = FrameDecoder(1 << 20)
    decoder.feed(_frame(b"x" * 60_000) + _frame(b"y" * 10))
    assert bytes(decoder.next_frame()) == b"x" * 60_000 and bytes(decoder.next_frame()) == b"y" * 10
    assert decoder.next_frame() is None
    assert len(decoder._buf) == 0 and decoder._buf.__alloc__() < 64 and not decoder.in_frame()


def test_a_body_over_64_kib_reserves_its_size_once_while_it_gathers():
    """A body over 64 KiB (and under the direct size) reserves once when its size arrives, then gathers as usual."""
    asked: list[int] = []
    decoder = FrameDecoder(1 << 30, reserve=lambda size: asked.append(size) or True)
    body = b"g" * 100_000
    data = _frame(body)
    for start in range(0, len(data), 30_000):
        decoder.feed(data[start:start + 30_000])
        frame = decoder.next_frame()
    assert bytes(frame) == body and asked == [100_000]
    assert decoder.take_reservation() == 100_000 and decoder.body_target() is None


def test_a_very_large_body_is_received_in_place_after_reserving_its_size():
    """A body over the direct size reserves its size, gets a buffer of exactly that size and is filled from the socket."""
    asked: list[int] = []
    decoder = FrameDecoder(1 << 30, direct_bytes=64 * 1024, reserve=lambda size: asked.append(size) or True)
    body = bytes(range(256)) * 1024
    data = _frame(body)
    decoder.feed(data[:1000])
    assert decoder.next_frame() is None and asked == [len(body)]
    target = decoder.body_target()
    assert target is not None and len(target) == len(body) - 996
    target[:] = data[1000:]
    decoder.commit(len(target))
    frame = decoder.next_frame()
    assert bytes(frame) == body and decoder.take_reservation() == len(body) and decoder.take_reservation() == 0


def test_a_refused_reservation_waits_and_allocates_nothing():
    """Without memory the decoder holds only the size field and says how much it waits for."""
    grant = [False]
    decoder = FrameDecoder(1 << 30, reserve=lambda size: grant[0])
    decoder.feed(_frame(b"z" * 100_000)[:10])
    assert decoder.next_frame() is None and decoder.waiting_for_memory == 100_000
    assert decoder._body is None and decoder.in_frame()
    grant[0] = True
    assert decoder.next_frame() is None and decoder.waiting_for_memory == 0 and decoder.receiving_body()
    assert decoder.release_all() == 100_000 and not decoder.in_frame()


def test_request_memory_is_first_come_first_served():
    """A waiter keeps its turn: later reservations queue behind it even when they would fit."""
    woken: list[str] = []
    memory: RequestMemory[str] = RequestMemory(100, woken.append)
    assert memory.try_reserve("a", 80)
    assert not memory.try_reserve("big", 50)
    assert not memory.try_reserve("small", 10)  # would fit, but "big" waits first
    memory.release(80)
    assert woken == ["big"]
    assert memory.try_reserve("big", 50) and woken == ["big", "small"]
    assert memory.try_reserve("small", 10) and memory.used == 60 and memory.waiting == 0


def test_a_waiter_that_leaves_passes_its_turn_on():
    """A waiting connection that closes lets the next waiter in."""
    woken: list[str] = []
    memory: RequestMemory[str] = RequestMemory(100, woken.append)
    memory.try_reserve("a", 90)
    memory.try_reserve("b", 50)
    memory.try_reserve("c", 5)
    memory.release(90)
    memory.forget("b")
    assert woken == ["b", "c"]


class _Conn:
    def __init__(self, fd: int, ip: str, idle: bool = True) -> None:
        self.fd, self.ip, self._idle = fd, ip, idle

    def idle(self) -> bool:
        return self._idle


def test_a_full_broker_makes_room_from_the_busiest_address():
    """At max.connections the least recently active idle connection of the busiest address makes room."""
    table = ConnectionTable(max_connections=4, max_per_ip=10)
    flood = [_Conn(i, "10.0.0.9") for i in range(3)]
    for conn in flood + [_Conn(9, "10.0.0.1")]:
        table.add(conn)
    table.touch(flood[0])  # now flood[1] is that address's oldest
    victim, limit = table.make_room("10.0.0.2")
    assert (victim, limit) == (flood[1], "max.connections")


def test_busy_connections_are_never_evicted():
    """When every connection of the address has a request in flight, the newcomer is refused instead."""
    table = ConnectionTable(max_connections=2, max_per_ip=10)
    table.add(_Conn(1, "a", idle=False))
    table.add(_Conn(2, "a", idle=False))
    assert table.make_room("b") == (None, "max.connections")


def test_the_per_address_limit_cycles_that_address_only():
    """max.connections.per.ip makes room among the same address's connections; others are untouched."""
    table = ConnectionTable(max_connections=100, max_per_ip=2)
    mine = [_Conn(1, "a"), _Conn(2, "a")]
    for conn in mine + [_Conn(3, "b")]:
        table.add(conn)
    assert table.make_room("a") == (mine[0], "max.connections.per.ip")
    assert table.make_room("b") == (None, "")
    table.remove(mine[0])
    assert table.count("a") == 1 and len(table) == 2


def test_throttled_log_writes_once_per_interval_with_a_count():
    """A flood of the same event writes one line, and the next line says how many were held back."""
    throttle = ThrottledLog(interval=60)
    with structlog.testing.capture_logs() as events:
        for _ in range(1000):
            throttle.warning("broker.accept_failed", error="Too many open files")
        throttle._last["broker.accept_failed"] -= 61
        throttle.warning("broker.accept_failed", error="Too many open files")
    assert [e["suppressed"] for e in events] == [0, 999]
