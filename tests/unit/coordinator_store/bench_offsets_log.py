"""Offset store figures: start-up replay time and commit throughput (figures, not assertions).

Run from the repository root::

    python -m tests.unit.coordinator_store.bench_offsets_log [--seconds 5] [--dir /path/on/the/real/disk]

Prints, for a log under ``--dir`` (a fresh temporary directory on it):

* replay: the time to replay (and apply into a dict model) a log that holds 100,000
  committed offsets, right after a compaction and just before the next one (the
  worst case: a snapshot plus compact_every_records - 1 records plus the rest of
  the segment the snapshot starts in), for one-offset commits and 100-offset commits;
* throughput: durable appends of OffsetsCommitted records of 100 partitions each,
  from 1 thread and from 50 threads: appends/s, offsets/s, fsyncs, p50/p99 latency.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time

import structlog

from rill.broker.log import Log
from rill.coordinator.offsets_log import OffsetStore
from rill.coordinator.records import OffsetsCommitted

from .conftest import STORE_CONFIG, TOPIC, Model

GROUPS, PARTITIONS = 1000, 100


def _fill(store: OffsetStore, model: Model, commits: int, per_record: int, per_append: int,
          start: int = 0) -> None:
    """Commit offsets round-robin over GROUPS x PARTITIONS, ``per_record`` offsets per record.

    ``per_append`` records go into one append (one fsync each; more than 1 only to
    build a large log quickly). Compaction is tried after every append, as the
    coordinator's RecordSink does.
    """
    batch: list[OffsetsCommitted] = []
    for n in range(start, start + commits):
        cell = (n * per_record) % (GROUPS * PARTITIONS)
        group, first = divmod(cell, PARTITIONS)
        offsets = tuple(("t", (first + i) % PARTITIONS, n) for i in range(per_record))
        batch.append(OffsetsCommitted(f"group-{group}", offsets))
        if len(batch) == per_append or n == start + commits - 1:
            store.append(batch, None)
            model.apply(batch)
            store.maybe_compact(model.snapshot)
            batch = []


def _replay_seconds(data_dir: str) -> tuple[float, int, int, int]:
    log = Log.open(data_dir, TOPIC, 0, STORE_CONFIG, clean=True)
    started = time.perf_counter()
    replayed = list(OffsetStore(log).replay())
    model = Model().apply(replayed)
    elapsed = time.perf_counter() - started
    size = log.end_offset - log.start_offset
    log.close()
    return elapsed, sum(len(v) for v in model.offsets.values()), len(replayed), size


def _print_replay(label: str, data_dir: str) -> None:
    elapsed, offsets, count, size = _replay_seconds(data_dir)
    print(f"replay, {label}: {elapsed * 1000:.0f} ms ({offsets} offsets in {count} records, "
          f"{size / 1e6:.1f} MB of log)")


def _until_next_compaction(store: OffsetStore, model: Model, data_dir: str, copy_dir: str, per_record: int,
                           start: int) -> int:
    """One-record appends until compaction starts; copy the log just before it writes the snapshot."""
    copied = []

    def snapshot() -> list:
        if not copied:
            shutil.copytree(data_dir, copy_dir)  # every append so far is fsynced
            copied.append(1)
        return model.snapshot()

    n = start
    while not copied:
        cell = (n * per_record) % (GROUPS * PARTITIONS)
        group, first = divmod(cell, PARTITIONS)
        record = OffsetsCommitted(f"group-{group}", tuple(("t", (first + i) % PARTITIONS, n)
                                                           for i in range(per_record)))
        store.append([record], None)
        model.apply([record])
        store.maybe_compact(snapshot)
        n += 1
    return n - start


def replay_figures(base: str) -> None:
    for per_record in (1, 100):
        label = f"{per_record} offset(s) per record"
        data_dir = tempfile.mkdtemp(dir=base)
        store = OffsetStore(Log.open(data_dir, TOPIC, 0, STORE_CONFIG))
        model = Model()
        records = GROUPS * PARTITIONS // per_record
        _fill(store, model, records, per_record, per_append=100 if per_record == 1 else 1)
        store.maybe_compact(model.snapshot)
        worst_dir = tempfile.mkdtemp(dir=base) + "/log"
        more = _until_next_compaction(store, model, data_dir, worst_dir, per_record, records)
        store.close()
        _print_replay(f"{label}, right after a compaction", data_dir)
        _print_replay(f"{label}, just before the next compaction ({more} one-record appends later; "
                      f"the worst case)", worst_dir)
        shutil.rmtree(data_dir)


def throughput(base: str, threads: int, seconds: float) -> None:
    data_dir = tempfile.mkdtemp(dir=base)
    log = Log.open(data_dir, TOPIC, 0, STORE_CONFIG)
    store = OffsetStore(log)
    fsyncs = [0]
    real_flush = log.flush

    def counting_flush() -> None:
        fsyncs[0] += 1
        real_flush()

    log.flush = counting_flush  # type: ignore[method-assign]
    model, model_lock = Model(), threading.Lock()
    latencies: list[float] = []
    stop = time.monotonic() + seconds

    def worker(n: int) -> None:
        group, seq, mine = f"group-{n}", 0, []
        while time.monotonic() < stop:
            record = OffsetsCommitted(group, tuple(("t", p, seq) for p in range(PARTITIONS)))
            started = time.perf_counter()
            store.append([record], None)
            mine.append(time.perf_counter() - started)
            with model_lock:
                model.apply([record])
            store.maybe_compact(lambda: _locked_snapshot(model, model_lock))
            seq += 1
        latencies.extend(mine)

    workers = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    started = time.monotonic()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.monotonic() - started
    store.close()
    latencies.sort()
    n = len(latencies)
    print(f"throughput, {threads} thread(s): {n / elapsed:.0f} appends/s = {n * PARTITIONS / elapsed:.0f} offsets/s "
          f"({n} appends of 1 record x {PARTITIONS} partitions in {elapsed:.1f} s, {fsyncs[0]} fsyncs, "
          f"latency p50 {latencies[n // 2] * 1000:.1f} ms, p99 {latencies[int(n * 0.99)] * 1000:.1f} ms)")
    shutil.rmtree(data_dir)


def _locked_snapshot(model: Model, lock: threading.Lock) -> list:
    with lock:
        return model.snapshot()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each throughput run")
    parser.add_argument("--dir", default=None, help="where to create the logs (default: the temp dir)")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))  # warnings and up
    base = tempfile.mkdtemp(dir=args.dir)
    print("command:", "python -m tests.unit.coordinator_store.bench_offsets_log", *sys.argv[1:])
    try:
        replay_figures(base)
        for threads in (1, 50):
            throughput(base, threads, args.seconds)
    finally:
        shutil.rmtree(base)


if __name__ == "__main__":
    main()
