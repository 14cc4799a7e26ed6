"""Flushing many logs with one syncfs (rill.broker.log.batch_sync): stop, recovery and busy flusher passes."""

from __future__ import annotations

import os

from rill.broker.log import LogConfig, LogManager, batch_sync
from rill.client.protocol.messages import encode_message_set

QUIET = LogConfig(flush_interval_messages=10**9, flush_interval_ms=3_600_000)


def _count_fsyncs(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    return calls


def test_flush_together_syncs_every_log_with_one_syncfs(tmp_path, monkeypatch):
    """Many logs flushed together: no per-file fsync, every log's flushed offset and waiters advance."""
    manager = LogManager(str(tmp_path), QUIET)
    manager.create_topic("t", 100)
    logs = [manager.get("t", p) for p in range(100)]
    woken = []
    for log in logs:
        info = log.append(encode_message_set([b"x"]))
        log.when_flushed(info.next_offset, lambda: woken.append(1))
    fsyncs = _count_fsyncs(monkeypatch)
    assert batch_sync.flush_together(logs, manager.data_dir) == []
    assert fsyncs == [] and len(woken) == 100
    assert all(log.flushed_offset == log.end_offset and not log.has_unflushed for log in logs)
    manager.close()


def test_a_busy_flusher_pass_uses_one_syncfs(tmp_path, monkeypatch):
    """From BATCH_SYNC_MIN logs due at once, flush_due syncs the file system once instead of each file."""
    manager = LogManager(str(tmp_path), LogConfig(flush_interval_messages=1))
    manager.create_topic("t", 80)
    for p in range(80):
        manager.get("t", p).append(encode_message_set([b"x"]))
    syncs: list[str] = []
    real = batch_sync.sync_filesystem
    monkeypatch.setattr(batch_sync, "sync_filesystem", lambda path: (syncs.append(path), real(path))[1])
    fsyncs = _count_fsyncs(monkeypatch)
    assert manager.flush_due(0.0) == 80
    assert len(syncs) == 1 and fsyncs == []
    manager.close()


def test_recovery_syncs_what_it_scanned_with_one_syncfs(tmp_path, monkeypatch):
    """After a crash, every recovered partition is made durable by one syncfs before the manager is ready."""
    manager = LogManager(str(tmp_path), QUIET)
    manager.create_topic("t", 50)
    for p in range(50):
        manager.get("t", p).append(encode_message_set([b"unsynced"]))
    for log in manager.logs():
        log.abandon()  # kill -9
    os.close(manager._lock_fd)
    syncs: list[str] = []
    real = batch_sync.sync_filesystem
    monkeypatch.setattr(batch_sync, "sync_filesystem", lambda path: (syncs.append(path), real(path))[1])
    fsyncs = _count_fsyncs(monkeypatch)
    again = LogManager(str(tmp_path), QUIET)
    assert syncs == [again.data_dir] and len(fsyncs) <= 2  # only the checkpoint file and its directory
    assert all(log.recovery_report.segments_scanned == 1 for log in again.logs())
    assert all(not s.unsynced for log in again.logs() for s in log.segments)
    again.close()


def test_a_failed_syncfs_falls_back_to_each_file(tmp_path, monkeypatch):
    """When syncfs reports an error, every log is flushed on its own, so only the failing ones are marked failed."""
    manager = LogManager(str(tmp_path), QUIET)
    manager.create_topic("t", 3)
    logs = [manager.get("t", p) for p in range(3)]
    for log in logs:
        log.append(encode_message_set([b"x"]))

    def broken(path):
        raise OSError(5, "Input/output error", path)

    monkeypatch.setattr(batch_sync, "sync_filesystem", broken)
    assert batch_sync.flush_together(logs, manager.data_dir) == []  # the files themselves sync fine
    assert all(log.flushed_offset == log.end_offset for log in logs)
    manager.close()
