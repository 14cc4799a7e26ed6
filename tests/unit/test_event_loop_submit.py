"""Work posted to the broker's event loop with a future (EventLoop.submit): run on the loop, or failed at once
when the loop has stopped, never left for its caller to wait out a timeout."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from rill.broker.dataplane.event_loop import EventLoop, LoopStopped
from rill.broker.dataplane.server import BrokerServer


@pytest.fixture
def serving() -> Iterator[BrokerServer]:
    server = BrokerServer("127.0.0.1", 0, max_request_size=1 << 20, max_connections=10, idle_timeout_ms=60_000)
    thread = threading.Thread(target=server.serve_forever, name="test-loop", daemon=True)
    thread.start()
    yield server
    server.stop()
    thread.join(timeout=10)


def boom() -> int:
    raise ValueError("boom")


def test_submitted_work_runs_on_the_loop_and_its_future_gets_the_result(serving: BrokerServer) -> None:
    """The future holds the work's return value, or the exception it raised; the work ran on the loop's thread."""
    threads: list[str] = []

    def work() -> int:
        threads.append(threading.current_thread().name)
        return 42

    assert serving.submit(work).result(timeout=5) == 42
    assert threads == ["test-loop"]
    with pytest.raises(ValueError, match="boom"):
        serving.submit(boom).result(timeout=5)


def test_work_submitted_after_stop_fails_at_once() -> None:
    """Once stop() was called, submit returns a future that has already failed with LoopStopped; the work never runs."""
    loop = EventLoop()
    ran: list[int] = []
    loop.stop()
    future = loop.submit(lambda: ran.append(1))
    assert future.done() and isinstance(future.exception(timeout=0), LoopStopped)
    loop.close()
    assert ran == []


def test_work_still_queued_when_the_loop_closes_fails() -> None:
    """Work accepted before the stop but not run by the loop's last turn fails with LoopStopped when the loop closes."""
    loop = EventLoop()
    future = loop.submit(lambda: 1)
    loop.stop()
    assert not future.done()
    loop.close()
    assert isinstance(future.exception(timeout=0), LoopStopped)


def test_a_stopped_server_fails_what_it_did_not_run(serving: BrokerServer) -> None:
    """After the serving loop has ended (stop, its last turn, close), a submit fails at once."""
    serving.stop()
    assert isinstance(serving.submit(lambda: 1).exception(timeout=1), LoopStopped)
