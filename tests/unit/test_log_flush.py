"""Flushing: by message count and by time, flush callbacks, fsync failures, the Flusher thread."""

from __future__ import annotations

import os
import threading
import time

import pytest

from rill.broker.log import Flusher, Log, LogConfig, LogManager
from rill.broker.log.checkpoint import read_checkpoint
from rill.client.errors import StorageError
from rill.client.protocol.messages import encode_message_set


@pytest.fixture
def log(tmp_path, clock):
    log = Log.open(str(tmp_path), "t", 0, LogConfig(flush_interval_messages=10, flush_interval_ms=1000), clock)
    yield log
    if log.failed is None:
        log.close()


def test_needs_flush_after_m_messages(log, clock):
    """needs_flush turns true once flush_interval_messages are unflushed."""
    log.append(encode_message_set([b"m"] * 9))
    assert not log.needs_flush(clock.now)
    log.append(encode_message_set([b"m"]))
    assert log.needs_flush(clock.now)
    log.flush()
    assert not log.needs_flush(clock.now)


def test_needs_flush_after_s_seconds(log, clock):
    """needs_flush turns true flush_interval_ms after the last flush if data is unflushed, never without."""
    clock.now += 5
    assert not log.needs_flush(clock.now)
    log.append(encode_message_set([b"m"]))
    log.flush()
    log.append(encode_message_set([b"m"]))
    assert not log.needs_flush(clock.now + 0.999)
    assert log.needs_flush(clock.now + 1.0)


def test_flush_signal_fires_when_count_is_crossed(log):
    """The flush signal is called by the append that reaches flush_interval_messages."""
    calls = []
    log.flush_signal = lambda: calls.append(log.end_offset)
    log.append(encode_message_set([b"m"] * 5))
    assert calls == []
    log.append(encode_message_set([b"m"] * 5))
    assert len(calls) == 1


def test_flush_advances_flushed_offset(log):
    """flushed_offset follows the log end after a flush."""
    log.append(encode_message_set([b"data"]))
    assert log.flushed_offset == 0
    log.flush()
    assert log.flushed_offset == log.end_offset == 14


def test_when_flushed_waits_for_flush(log):
    """A callback registered for an unflushed offset runs only once a flush covers it."""
    info = log.append(encode_message_set([b"a"]))
    called = []
    log.when_flushed(info.next_offset, lambda: called.append(log.flushed_offset))
    assert called == []
    log.flush()
    assert called == [info.next_offset]


def test_when_flushed_runs_at_once_when_already_flushed(log):
    """A callback for an offset already flushed runs immediately."""
    log.append(encode_message_set([b"a"]))
    log.flush()
    called = []
    log.when_flushed(log.end_offset, lambda: called.append(True))
    assert called == [True]


def test_when_flushed_runs_on_the_flushing_thread(log):
    """Callbacks run on whatever thread performed the flush."""
    info = log.append(encode_message_set([b"a"]))
    threads = []
    log.when_flushed(info.next_offset, lambda: threads.append(threading.current_thread().name))
    worker = threading.Thread(target=log.flush, name="flusher-under-test")
    worker.start()
    worker.join()
    assert threads == ["flusher-under-test"]


def test_when_flushed_keeps_later_waiters(log):
    """Only callbacks whose offset is covered run; later ones wait for a later flush."""
    first = log.append(encode_message_set([b"a"]))
    called = []
    log.when_flushed(first.next_offset, lambda: called.append(1))
    log.when_flushed(first.next_offset + 11, lambda: called.append(2))
    log.flush()
    log.append(encode_message_set([b"b"]))
    assert called == [1]
    log.flush()
    assert called == [1, 2]


def test_fsync_failure_fails_the_log_and_is_not_retried(log, monkeypatch):
    """A failed fsync raises StorageError, fails later appends and flushes, and is never retried."""
    log.append(encode_message_set([b"a"]))
    errors, attempts = [], []

    def broken_fsync(fd):
        attempts.append(fd)
        raise OSError(5, "Input/output error")

    log.when_flushed(log.end_offset, lambda: errors.append("flushed?!"), errors.append)
    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(StorageError):
        log.flush()
    assert len(attempts) == 1 and isinstance(log.failed, OSError)
    assert len(errors) == 1 and isinstance(errors[0], OSError)
    with pytest.raises(StorageError):
        log.flush()
    with pytest.raises(StorageError):
        log.append(encode_message_set([b"b"]))
    assert len(attempts) == 1 and log.flushed_offset == 0


def test_recovery_point_checkpoint_is_written_after_flushes(tmp_path, clock):
    """Housekeeping writes every log's flushed offset to the checkpoint once its interval passed and a flush ran."""
    manager = LogManager(str(tmp_path), LogConfig(recovery_point_interval_ms=1000, flush_interval_messages=1), clock=clock)
    manager.create_topic("t", 2)
    info = manager.get("t", 1).append(encode_message_set([b"a"]))
    manager.housekeeping(clock.now + 2)
    assert read_checkpoint(str(tmp_path)) is None  # nothing was flushed yet: no write
    manager.flush_due(clock.now)
    manager.housekeeping(clock.now + 4)
    assert read_checkpoint(str(tmp_path)) == {("t", 0): 0, ("t", 1): info.next_offset}
    manager.close()


def test_close_flushes(tmp_path):
    """Closing a log flushes what was appended."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig())
    log.append(encode_message_set([b"a"]))
    log.close()
    assert log.flushed_offset == log.end_offset
    with pytest.raises(StorageError):
        log.append(encode_message_set([b"b"]))


class _Target:
    def __init__(self) -> None:
        self.flushes: list[float] = []
        self.retentions: list[float] = []
        self.event = threading.Event()

    def flush_due(self, now: float) -> int:
        self.flushes.append(now)
        self.event.set()
        return 0

    def run_retention(self, now: float) -> int:
        self.retentions.append(now)
        return 0

    def housekeeping(self, now: float) -> None:
        pass


def _wait_for(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


def test_flusher_wakes_periodically_and_stops(clock):
    """The Flusher calls flush_due on its period and stop() joins the thread."""
    target = _Target()
    flusher = Flusher(target, LogConfig(flush_interval_ms=10), clock)
    flusher.start()
    assert _wait_for(lambda: len(target.flushes) >= 3)
    flusher.stop()
    assert not flusher.is_alive()


def test_flusher_runs_retention_on_its_interval(clock):
    """Retention runs once retention_check_interval_ms has passed on the clock."""
    target = _Target()
    flusher = Flusher(target, LogConfig(flush_interval_ms=10, retention_check_interval_ms=1000), clock)
    flusher.start()
    assert _wait_for(lambda: len(target.flushes) >= 2)
    assert target.retentions == []
    clock.now += 1.5
    assert _wait_for(lambda: len(target.retentions) == 1)
    flusher.stop()


def test_flusher_wake_triggers_a_pass(clock):
    """wake() makes the thread run a flush pass without waiting for its period."""
    target = _Target()
    flusher = Flusher(target, LogConfig(), clock, wake_interval_ms=60_000)
    flusher.start()
    assert not target.event.wait(0.05)
    flusher.wake()
    assert target.event.wait(5)
    flusher.stop()


def test_flusher_flush_soon_flushes_without_m_or_s(tmp_path, clock):
    """flush_soon has the next pass flush a log that reached neither M messages nor S seconds."""
    log = Log.open(str(tmp_path), "t", 0, LogConfig(flush_interval_messages=10**9, flush_interval_ms=60_000), clock)
    flusher = Flusher(_Target(), LogConfig(), clock, wake_interval_ms=60_000)
    flusher.start()
    done = threading.Event()
    info = log.append(encode_message_set([b"ack me"]))
    log.when_flushed(info.next_offset, done.set)
    flusher.flush_soon([log])
    assert done.wait(5) and log.flushed_offset == info.next_offset
    flusher.stop()
    log.close()


def test_flush_signal_wakes_the_flusher_only_at_m_messages(tmp_path, clock):
    """A log's flush_signal, hooked to wake(), triggers a pass only once flush_interval_messages are unflushed."""
    config = LogConfig(flush_interval_messages=5)
    log = Log.open(str(tmp_path), "t", 0, config, clock)
    target = _Target()
    flusher = Flusher(target, config, clock, wake_interval_ms=60_000)
    log.flush_signal = flusher.wake
    flusher.start()
    log.append(encode_message_set([b"m"] * 4))
    assert not target.event.wait(0.05)
    log.append(encode_message_set([b"m"]))
    assert target.event.wait(5)
    flusher.stop()
    log.close()
