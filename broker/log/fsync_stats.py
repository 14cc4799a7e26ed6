"""How long this process's log fsyncs take: one histogram for the whole process.

A log's flush (its segments' fsyncs) and a batched file-system sync (batch_sync.py) are
timed here, from the flusher's thread and its fsync pool, hence the lock. One broker
runs per process in production, so process-wide is per broker; brokers run in one
test process share it. Exposed as ``rill_log_flush_seconds``
(rill.broker.metrics.broker_collector).
"""

from __future__ import annotations

from rill.client.bucket_histogram import LockedHistogram

__all__ = ["FSYNC_SECONDS"]

# 100 µs (a sync with nothing to write) .. 10 s (a disk in trouble)
FSYNC_SECONDS = LockedHistogram((100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                 1.0, 2.5, 5.0, 10.0))
