"""Many threads appending at once: each record exactly once, in one order, with shared fsyncs."""

from __future__ import annotations

import threading
from collections import Counter

from .conftest import commit, reopen

THREADS = 8
APPENDS = 60


def test_concurrent_appends_are_all_replayed_once_with_shared_fsyncs(store, log, open_log):
    """8 threads appending at once: every record is replayed exactly once, each thread's in its order,
    batches whole, and there are fewer fsyncs than appends (group commit)."""
    flushes = Counter[str]()
    real_flush = log.flush

    def counting_flush() -> None:
        flushes["flush"] += 1
        real_flush()

    log.flush = counting_flush
    start = threading.Barrier(THREADS)
    written: list[list] = [[] for _ in range(THREADS)]

    def worker(n: int) -> None:
        start.wait()
        for seq in range(APPENDS):
            batch = [commit(f"thread-{n}", seq, seq)]
            if seq % 4 == 0:
                batch.append(commit(f"thread-{n}", seq, -seq - 1))  # a two-record batch
            store.append(batch, 10.0)
            written[n].extend(batch)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    replayed = reopen(open_log, store)
    assert Counter(replayed) == Counter(r for batch in written for r in batch)
    assert len(replayed) == len(set(replayed))
    for n in range(THREADS):
        assert [r for r in replayed if r.group == f"thread-{n}"] == written[n]  # per-thread order, batches whole
    for i, record in enumerate(replayed):  # the two records of a batch are adjacent
        partition, offset = record.offsets[0][1:]
        if offset < 0:
            assert replayed[i - 1] == commit(record.group, partition, partition)
    assert 0 < flushes["flush"] < THREADS * APPENDS
