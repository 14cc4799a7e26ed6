"""FakeClock/FakeTimer (advance runs due callbacks) and the one-thread ThreadTimer."""

from __future__ import annotations

import threading

from rill.client.clock import FakeClock, FakeTimer, ThreadTimer


def test_fake_timer_runs_due_callbacks_in_order_at_their_time() -> None:
    """advance() runs each due callback at its own due time, in order, and not the later ones."""
    clock = FakeClock(100.0)
    timer = FakeTimer(clock)
    seen: list[tuple[str, float]] = []
    timer.schedule(2, lambda: seen.append(("b", clock.time())))
    timer.schedule(1, lambda: seen.append(("a", clock.time())))
    timer.schedule(5, lambda: seen.append(("c", clock.time())))
    clock.advance(3)
    assert seen == [("a", 101.0), ("b", 102.0)] and clock.time() == 103.0
    assert timer.pending() == 1


def test_fake_timer_runs_callbacks_scheduled_by_callbacks() -> None:
    """A callback that schedules another within the advanced span sees it run too; cancelled ones never run."""
    timer = FakeTimer()
    seen: list[str] = []
    timer.schedule(1, lambda: timer.schedule(1, lambda: seen.append("second")))
    timer.schedule(1, lambda: seen.append("cancelled")).cancel()
    timer.advance(2)
    assert seen == ["second"]


def test_thread_timer_runs_and_cancels_on_one_thread() -> None:
    """ThreadTimer runs callbacks after their delay on its thread, skips cancelled ones, and stops."""
    timer = ThreadTimer()
    ran = threading.Event()
    threads: list[str] = []
    def record() -> None:
        threads.append(threading.current_thread().name)
        ran.set()

    skipped = timer.schedule(0.01, lambda: threads.append("cancelled"))
    skipped.cancel()
    timer.schedule(0.02, record)
    assert ran.wait(5)
    timer.stop()
    assert threads == ["rill-coordinator-timer"]
    assert timer.clock.time() > 1e9


def test_thread_timer_survives_an_absurdly_distant_deadline():
    """A callback 2^62 ms away (a rebalance timeout replayed from an old log) does not stop the thread serving the others."""
    import threading

    timer = ThreadTimer()
    done = threading.Event()
    timer.schedule(2**62 / 1000, lambda: None)
    threading.Event().wait(0.2)  # the thread is now waiting for that deadline
    timer.schedule(0.05, done.set)
    assert done.wait(5)
    timer.stop()
