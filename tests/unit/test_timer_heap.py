"""The loop timers: due in deadline order, cancelled ones never run."""

from __future__ import annotations

from rill.client.net.timer_heap import TimerHeap


def test_timers_come_due_in_order_and_cancelled_ones_are_skipped() -> None:
    now = [100.0]
    heap = TimerHeap(clock=lambda: now[0])
    ran: list[str] = []
    heap.call_later(2.0, lambda: ran.append("b"))
    heap.call_later(1.0, lambda: ran.append("a"))
    heap.call_later(1.5, lambda: ran.append("x")).cancel()
    assert heap.next_deadline() == 101.0 and heap.pop_due() == []
    now[0] = 101.6
    for timer in heap.pop_due():
        timer.callback()
    assert ran == ["a"] and heap.next_deadline() == 102.0  # the cancelled one left the heap unrun
    now[0] = 103.0
    for timer in heap.pop_due():
        timer.callback()
    assert ran == ["a", "b"] and heap.next_deadline() is None
