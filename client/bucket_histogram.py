"""Histograms kept as plain bucket counts, exposed to Prometheus at scrape time.

``prometheus_client.Histogram`` takes a lock per observation (about 1 µs with its
label lookup); the request path runs on the one event-loop thread, so its histograms
need none: an observation is a bisect and two additions (about 0.2 µs). A scrape on the
HTTP thread copies the bucket list (one C call under the GIL); it may see a count and
a sum one observation apart, which Prometheus's rate() absorbs.

For histograms written by several threads (gRPC workers, the flusher's fsync pool)
use :class:`LockedHistogram`, the same with a lock around each observation.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client.core import HistogramMetricFamily

__all__ = ["LATENCY_BUCKETS", "LockedHistogram", "LoopHistogram", "histogram_family"]

# 50 µs .. 10 s: a request served from the page cache takes tens of microseconds, a long poll seconds
LATENCY_BUCKETS: tuple[float, ...] = (50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05,
                                      0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class LoopHistogram:
    """Counts per bucket (upper bounds ``bounds``, then +Inf) and the sum; one thread observes."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float] = LATENCY_BUCKETS) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # le semantics: value <= bound lands in that bucket
        self.total += value

    def snapshot(self) -> tuple[list[int], float]:
        """(counts per bucket, sum), copied."""
        return list(self.counts), self.total

    @property
    def count(self) -> int:
        return sum(self.counts)


class LockedHistogram(LoopHistogram):
    """:class:`LoopHistogram` for several writing threads."""

    __slots__ = ("_lock",)

    def __init__(self, bounds: Sequence[float] = LATENCY_BUCKETS) -> None:
        super().__init__(bounds)
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        with self._lock:
            LoopHistogram.observe(self, value)

    def snapshot(self) -> tuple[list[int], float]:
        with self._lock:
            return list(self.counts), self.total


def histogram_family(name: str, documentation: str, labels: Sequence[str],
                     rows: Iterable[tuple[Sequence[str], LoopHistogram]]) -> HistogramMetricFamily:
    """A Prometheus histogram family of ``rows`` (label values, histogram), cumulative buckets
    (prometheus_client is imported here, so that importing this module costs nothing)."""
    from prometheus_client.core import HistogramMetricFamily

    family = HistogramMetricFamily(name, documentation, labels=list(labels))
    for values, histogram in rows:
        counts, total = histogram.snapshot()
        buckets: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip(histogram.bounds, counts):
            running += count
            buckets.append((_bound_text(bound), running))
        buckets.append(("+Inf", running + counts[-1]))
        family.add_metric(list(values), buckets, total)
    return family


def _bound_text(bound: float) -> str:
    return repr(float(bound))
