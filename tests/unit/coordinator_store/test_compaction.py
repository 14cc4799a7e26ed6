"""Compaction: a snapshot re-states the state, older segments go, unapplied batches are waited for."""

from __future__ import annotations

import random
import threading
import time

import structlog

from rill.broker.log import LogConfig
from rill.coordinator.offsets_log import OffsetStore
from rill.coordinator.records import GenerationStarted, GroupDeleted

from .conftest import Model, commit, group_created, reopen

SMALL_SEGMENTS = LogConfig(segment_bytes=2048, flush_interval_messages=2**62)


def random_batch(rng: random.Random, n: int) -> list:
    group = f"g{rng.randrange(12)}"
    roll = rng.random()
    if roll < 0.05:
        return [GroupDeleted(group)]
    if roll < 0.15:
        return [group_created(group), GenerationStarted(group, n, {"c": (("t", 0),)})]
    return [commit(group, rng.randrange(8), n) for _ in range(rng.randrange(1, 4))]


def test_compaction_keeps_the_state_and_deletes_old_segments(open_log):
    """After compactions, replay gives the same state as before them, from far fewer segments."""
    log = open_log(config=SMALL_SEGMENTS)
    store = OffsetStore(log, compact_every_records=100)
    model, rng, compactions = Model(), random.Random(7), 0
    for n in range(1500):
        batch = random_batch(rng, n)
        store.append(batch, None)
        model.apply(batch)
        compactions += store.maybe_compact(model.snapshot)
    assert compactions >= 10
    assert log.start_offset > 0 and len(log.segments) < 15
    replayed = reopen(open_log, store)
    assert Model().apply(replayed) == model
    assert len(replayed) < 400  # about one snapshot plus what came after it


def test_compaction_is_not_due_before_enough_records(log):
    """maybe_compact does not call the snapshot before compact_every_records records were appended."""
    store = OffsetStore(log, compact_every_records=5)
    calls = []
    for n in range(4):
        store.append([commit("g", n, n)], None)
        assert not store.maybe_compact(lambda: calls.append(1) or [])
    assert calls == []
    store.append([commit("g", 4, 4)], None)
    assert store.maybe_compact(lambda: calls.append(1) or [])
    assert calls == [1]


def test_a_larger_snapshot_defers_the_next_compaction(log):
    """A snapshot larger than compact_every_records is not rewritten until as many records followed it."""
    store = OffsetStore(log, compact_every_records=2)
    model = Model()
    for n in range(2):
        store.append([commit(f"g{n}", 0, n)], None)
        model.apply([commit(f"g{n}", 0, n)])
    big = lambda: model.snapshot() * 3  # noqa: E731  (6 records re-stating the same state)
    assert store.maybe_compact(big)
    for n in range(5):
        store.append([commit("g0", 1, n)], None)
        assert not store.maybe_compact(big)
    store.append([commit("g0", 1, 5)], None)
    assert store.maybe_compact(big)


def test_replayed_records_count_toward_compaction(open_log):
    """After a restart, the records replayed count toward the next compaction."""
    store = OffsetStore(open_log(), compact_every_records=10)
    for n in range(10):
        store.append([commit("g", n, n)], None)
    store.close()
    store = OffsetStore(open_log(), compact_every_records=10)
    model = Model().apply(store.replay())
    assert store.maybe_compact(model.snapshot)


def test_compaction_waits_for_a_batch_another_thread_has_not_applied(log, open_log):
    """A snapshot is taken only after every batch already written has been applied by its thread."""
    store = OffsetStore(log, compact_every_records=1)
    model = Model()
    written, go = threading.Event(), threading.Event()

    def slow_applier() -> None:
        store.append([commit("late", 0, 99)], None)
        written.set()
        go.wait(5)
        model.apply([commit("late", 0, 99)])
        store.maybe_compact(model.snapshot)

    applier = threading.Thread(target=slow_applier)
    applier.start()
    assert written.wait(5)
    snapshots = []

    def snapshot() -> list:
        snapshots.append(model.snapshot())
        return snapshots[-1]

    compactor = threading.Thread(target=store.maybe_compact, args=(snapshot,))
    compactor.start()
    time.sleep(0.2)
    assert snapshots == []  # still waiting for the late batch
    go.set()
    applier.join()
    compactor.join()
    assert snapshots == [[commit("late", 0, 99)]]
    assert Model().apply(reopen(open_log, store)) == model


def test_compaction_gives_up_when_a_batch_is_never_applied(log):
    """If a written batch stays unapplied past drain_timeout, compaction is postponed and logged."""
    store = OffsetStore(log, compact_every_records=1, drain_timeout=0.1)
    written, done = threading.Event(), threading.Event()

    def stuck() -> None:
        store.append([commit("stuck", 0, 1)], None)
        written.set()
        done.wait(5)  # never applies, never calls maybe_compact

    thread = threading.Thread(target=stuck)
    thread.start()
    assert written.wait(5)
    with structlog.testing.capture_logs() as events:
        assert not store.maybe_compact(lambda: [])
    assert [e["pending_batches"] for e in events if e["event"] == "offsets_log.compaction_postponed"] == [1]
    store.append([commit("g", 0, 1)], 1.0)  # appends go on
    done.set()
    thread.join()


def test_appends_wait_while_the_snapshot_is_written(log, open_log):
    """An append that arrives during compaction is written after the snapshot, never inside it."""
    store = OffsetStore(log, compact_every_records=1)
    model = Model()
    in_snapshot, release = threading.Event(), threading.Event()

    def snapshot() -> list:
        in_snapshot.set()
        release.wait(5)
        return model.snapshot()

    def handler() -> None:  # append, apply, then compact: what the coordinator's RecordSink does
        store.append([commit("g", 0, 1)], None)
        model.apply([commit("g", 0, 1)])
        store.maybe_compact(snapshot)

    compactor = threading.Thread(target=handler)
    compactor.start()
    assert in_snapshot.wait(5)
    end = log.end_offset
    appender = threading.Thread(target=store.append, args=([commit("g", 0, 2)], 5.0))
    appender.start()
    time.sleep(0.1)
    assert log.end_offset == end  # the append waits
    release.set()
    compactor.join()
    appender.join()
    assert reopen(open_log, store)[-2:] == [commit("g", 0, 1), commit("g", 0, 2)]


def test_a_failing_snapshot_postpones_compaction(log, open_log):
    """If the snapshot raises, nothing is written, the error is logged, and appends go on."""
    store = OffsetStore(log, compact_every_records=1)
    store.append([commit("g", 0, 1)], None)
    end = log.end_offset

    def broken() -> list:
        raise RuntimeError("bug in snapshot_records")

    with structlog.testing.capture_logs() as events:
        assert not store.maybe_compact(broken)
    assert log.end_offset == end
    assert [e["log_level"] for e in events if e["event"] == "offsets_log.compaction_failed"] == ["error"]
    store.append([commit("g", 0, 2)], 1.0)
    assert reopen(open_log, store) == [commit("g", 0, 1), commit("g", 0, 2)]


def test_a_snapshot_the_log_refuses_postpones_compaction(open_log):
    """If a snapshot record is over the log's max message size, nothing is deleted, the error is logged,
    and the log still replays the whole state."""
    log = open_log(config=LogConfig(max_message_bytes=300, segment_bytes=1024, flush_interval_messages=2**62))
    store = OffsetStore(log, compact_every_records=50)
    model = Model()
    with structlog.testing.capture_logs() as events:
        for p in range(60):
            store.append([commit("g", p, p)], None)
            model.apply([commit("g", p, p)])
            assert not store.maybe_compact(model.snapshot)  # one record of 50+ offsets: > 300 bytes
    assert [e["event"] for e in events if e["log_level"] == "error"] == ["offsets_log.compaction_failed"]
    assert log.start_offset == 0
    store.append([commit("g", 0, 1000)], 1.0)
    model.apply([commit("g", 0, 1000)])
    assert Model().apply(reopen(open_log, store)) == model
