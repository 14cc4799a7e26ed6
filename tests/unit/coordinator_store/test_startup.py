"""Start-up time: replaying a compacted log of 100,000 committed offsets stays fast (a fraction of a second here)."""

from __future__ import annotations

import shutil
import time

import pytest

from rill.broker.log import Log
from rill.coordinator.offsets_log import OffsetStore
from rill.coordinator.records import OffsetsCommitted

from .conftest import STORE_CONFIG, TOPIC, Model

GROUPS, PARTITIONS = 1000, 100
# measured 0.07 s (after a compaction) and 0.22 s (worst case) on a 2-core VM, but 1.11 s once in a CI
# run (the whole suite's heap, a busy machine): the bound catches a replay gone quadratic or slow per
# record, not machine noise; the speed itself is a benchmark's to report
BOUND_S = 3.0


def test_replay_of_100k_one_offset_commits_after_compaction_is_fast(open_log):
    """100,000 one-offset commits (1,000 groups x 100 partitions), compacted as the store does, replay within BOUND_S."""
    store = OffsetStore(open_log())
    model = Model()
    for group in range(GROUPS):  # 100 records to an append, only to build the log faster
        batch = [OffsetsCommitted(f"group-{group}", (("t", p, 1000 + p),)) for p in range(PARTITIONS)]
        store.append(batch, None)
        model.apply(batch)
        store.maybe_compact(model.snapshot)
    store.close()
    log = open_log(clean=True)
    started = time.perf_counter()
    replayed = Model().apply(OffsetStore(log).replay())
    elapsed = time.perf_counter() - started
    assert replayed == model
    assert sum(len(offsets) for offsets in model.offsets.values()) == GROUPS * PARTITIONS
    assert elapsed < BOUND_S, f"replay took {elapsed:.3f} s"


@pytest.mark.slow  # about 4 s of set-up: some 3,000 durable appends of 100-offset records
def test_replay_just_before_a_compaction_is_fast(open_log, tmp_path):
    """The largest log of 100-offset commits (a snapshot of 100,000 offsets plus every record up to the next
    compaction) replays within BOUND_S."""
    store = OffsetStore(open_log())
    model = Model()
    copy = tmp_path / "worst"
    snapshots = []

    def snapshot() -> list:
        snapshots.append(1)
        if len(snapshots) == 2:  # the log at its largest, just before the second compaction writes
            shutil.copytree(tmp_path / f"{TOPIC}-0", copy / f"{TOPIC}-0")
        return model.snapshot()

    round_ = 0
    while len(snapshots) < 2:
        for group in range(GROUPS):
            record = OffsetsCommitted(f"group-{group}", tuple(("t", p, round_) for p in range(PARTITIONS)))
            store.append([record], None)
            model.apply([record])
            if store.maybe_compact(snapshot) and len(snapshots) == 2:
                break
        round_ += 1
    store.close()
    log = Log.open(str(copy), TOPIC, 0, STORE_CONFIG, clean=True)
    started = time.perf_counter()
    replayed = Model().apply(OffsetStore(log).replay())
    elapsed = time.perf_counter() - started
    log.close()
    assert sum(len(offsets) for offsets in replayed.offsets.values()) == GROUPS * PARTITIONS
    assert elapsed < BOUND_S, f"replay took {elapsed:.3f} s"
