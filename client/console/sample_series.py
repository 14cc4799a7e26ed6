"""A bounded time series of samples, and the rate of a growing counter over it.

:class:`TimeSeries` keeps ``(time, value)`` samples, oldest first, for at most ``window``
seconds and at most ``maxlen`` samples (a ``collections.deque`` with ``maxlen``), so
the console's memory stays bounded however long it runs: a sample older than the
window is dropped when a newer one arrives, and a full deque drops its oldest.

Not thread-safe: the lag sampler guards its series with its own lock.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

__all__ = ["TimeSeries", "rate"]

V = TypeVar("V")


class TimeSeries(Generic[V]):
    """Samples of one quantity, oldest first, bounded by ``window`` seconds and ``maxlen`` samples."""

    def __init__(self, window: float, maxlen: int) -> None:
        if window <= 0 or maxlen < 2:
            raise ValueError("need window > 0 and maxlen >= 2")
        self.window = window
        self._samples: deque[tuple[float, V]] = deque(maxlen=maxlen)

    def add(self, when: float, value: V) -> None:
        """Append a sample taken at ``when`` (seconds, not before the last one) and drop those out of the window."""
        self._samples.append((when, value))
        while self._samples and self._samples[0][0] < when - self.window:
            self._samples.popleft()

    def points(self) -> list[tuple[float, V]]:
        """The samples, oldest first (a copy)."""
        return list(self._samples)

    def last(self) -> tuple[float, V] | None:
        """The newest sample, or None when there is none."""
        return self._samples[-1] if self._samples else None

    def __len__(self) -> int:
        return len(self._samples)


def rate(series: TimeSeries[int], span: float) -> float | None:
    """How fast the counter in ``series`` grew, per second, over its samples of the last ``span`` seconds.

    Measured from the oldest sample in the span to the newest. A drop (the counter started
    again: a topic deleted and created anew) starts the measure after it.

    Returns:
        Units per second (0.0 when it did not grow), or None with fewer than two samples
        in the span (nothing to compare yet).
    """
    points = series.points()
    if len(points) < 2:
        return None
    newest_time, newest = points[-1]
    first = len(points) - 1
    while first > 0 and points[first - 1][0] >= newest_time - span and points[first - 1][1] <= points[first][1]:
        first -= 1
    oldest_time, oldest = points[first]
    if newest_time <= oldest_time:
        return None
    return (newest - oldest) / (newest_time - oldest_time)
