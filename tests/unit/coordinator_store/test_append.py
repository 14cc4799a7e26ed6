"""Appending: round trips, durability, all-or-nothing batches, failures, timeouts."""

from __future__ import annotations

import os
import threading
import time

import pytest

from rill.broker.log import LogConfig
from rill.client.errors import StorageError
from rill.coordinator.offsets_log import OffsetStore
from rill.coordinator.records import GenerationStarted, GroupDeleted, OffsetsCommitted

from .conftest import commit, group_created, reopen

EVERY_TYPE = [
    group_created("g"),
    GenerationStarted("g", 3, {"c-1": (("t", 0), ("t", 1)), "c-2": (("u", 0),)}),
    OffsetsCommitted("g", (("t", 0, 14), ("t", 1, 28), ("u", 0, 0))),
    OffsetsCommitted("g", (("t", 0, 0),), rewind=True),
    GenerationStarted("h", 1),
    GroupDeleted("g"),
]


def test_every_record_type_round_trips_alone(store, open_log):
    """Each record type appended on its own comes back equal after a reopen and replay."""
    for record in EVERY_TYPE:
        store.append([record], None)
    assert reopen(open_log, store) == EVERY_TYPE


def test_every_record_type_round_trips_in_one_batch(store, open_log):
    """A batch holding every record type comes back equal, in order, after a reopen and replay."""
    store.append(EVERY_TYPE, None)
    store.append([commit("h", 0, 5)], None)
    assert reopen(open_log, store) == EVERY_TYPE + [commit("h", 0, 5)]


def test_append_returns_only_when_durable(store, log):
    """When append returns, the log is fsynced at least up to its end."""
    for n in range(3):
        store.append([commit("g", n, n)], None)
        assert log.flushed_offset >= log.end_offset > 0
    store.append(EVERY_TYPE, None)
    assert log.flushed_offset >= log.end_offset


def test_empty_batch_writes_nothing(store, log):
    """Appending no records writes nothing and returns at once."""
    store.append([], None)
    assert log.end_offset == 0


def test_torn_batch_is_replayed_not_at_all(store, log, open_log):
    """A batch cut short by a crash mid-write is dropped whole at recovery: no record of it is replayed."""
    store.append([commit("g", 0, 1)], None)
    before = log.end_offset
    store.append([commit("g", p, 100 + p) for p in range(50)], None)
    os.truncate(log.segments[-1].path, before + (log.end_offset - before) // 2)  # the crash tore the write
    assert reopen(open_log) == [commit("g", 0, 1)]


def test_refused_batch_writes_nothing(open_log):
    """A batch the log refuses (too large) raises StorageError and leaves the log unchanged."""
    log = open_log(config=LogConfig(max_message_bytes=200, flush_interval_messages=2**62))
    store = OffsetStore(log)
    store.append([commit("g", 0, 1)], None)
    end = log.end_offset
    with pytest.raises(StorageError):
        store.append([OffsetsCommitted("g", tuple(("t", p, p) for p in range(5000)))], None)
    assert log.end_offset == end
    assert list(OffsetStore(log).replay()) == [commit("g", 0, 1)]


def test_failed_fsync_raises_storage_error(store, monkeypatch):
    """A failed fsync makes append raise StorageError, and every later append too."""
    def broken_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(StorageError):
        store.append([commit("g", 0, 1)], None)
    monkeypatch.undo()
    with pytest.raises(StorageError):
        store.append([commit("g", 0, 2)], None)


def test_append_times_out_behind_a_slow_fsync(store, log):
    """An append whose timeout passes while another thread's fsync runs raises TimeoutError."""
    real_flush = log.flush
    in_flush = threading.Event()

    def slow_flush() -> None:
        in_flush.set()
        time.sleep(0.5)
        real_flush()

    log.flush = slow_flush
    leader = threading.Thread(target=store.append, args=([commit("g", 0, 1)], None))
    leader.start()
    assert in_flush.wait(5)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        store.append([commit("h", 0, 1)], 0.05)
    assert time.monotonic() - started < 0.4
    leader.join()
    log.flush = real_flush


def test_append_after_close_raises_storage_error(store):
    """Once the store is closed, append raises StorageError."""
    store.close()
    with pytest.raises(StorageError):
        store.append([commit("g", 0, 1)], None)


def test_acknowledged_records_survive_a_kill(open_log):
    """Every record whose append returned is replayed after the log is reopened without a clean shutdown."""
    store = OffsetStore(open_log())
    acknowledged = []
    for n in range(200):
        batch = [commit(f"g{n % 7}", n, n)] if n % 3 else [commit("g", n, n), commit("h", n, n)]
        store.append(batch, None)
        acknowledged.extend(batch)
    # no close(): the process "dies" here; the next start-up opens the files unclean
    assert reopen(open_log) == acknowledged
