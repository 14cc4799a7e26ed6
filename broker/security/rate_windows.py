"""A rate measured over sampled windows, as Kafka measures quotas (its ``Rate`` over a ``SampledStat``).

The rate is kept in ``num`` samples of ``size_s`` seconds each (the broker's
``quota.window.num``, default 11, and ``quota.window.size.seconds``, default 1). A
sample is a start time and the sum of the values recorded into it:

- **Recording** adds to the current sample; once ``size_s`` has passed since its start,
  the next sample (the oldest, reused: the samples form a ring) starts instead, at the
  window boundary ``now`` falls in, so windows stay aligned after an idle gap.
- **Expiry.** A sample whose start is ``num * size_s`` or more in the past is obsolete
  and reset (its sum to 0, its start to now) before every measurement.
- **Measuring** divides the sum of all samples by the elapsed window: ``now`` minus
  the start of the oldest sample, but never less than ``num - 1`` whole windows plus the
  fraction of the current one. That floor is Kafka's correction for a new rate: one
  second into a fresh 11-second window, dividing by one second would report a burst as
  ten times what it is over the window.

Time is injected (``now``, in seconds, from any monotonic clock); nothing here reads a
clock. Not thread-safe: the quota manager serialises access.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SampledRate", "WindowSettings"]

MIN_WINDOW_S = 0.001
"""The smallest elapsed window a rate is divided by (Kafka's 1 ms): a rate over no time is undefined."""


@dataclass(frozen=True, slots=True)
class WindowSettings:
    """How rates are measured: ``num`` samples of ``size_s`` seconds (Kafka: 11 x 1 s).

    Raises:
        ValueError: ``num`` below 1 or ``size_s`` not above 0.
    """

    num: int = 11
    size_s: float = 1.0

    def __post_init__(self) -> None:
        if self.num < 1:
            raise ValueError(f"quota.window.num must be >= 1, got {self.num}")
        if not self.size_s > 0:
            raise ValueError(f"quota.window.size.seconds must be > 0, got {self.size_s}")

    @property
    def span_s(self) -> float:
        """How long a recorded value counts: ``num * size_s`` seconds."""
        return self.num * self.size_s


class _Sample:
    """One window: when it started and the sum recorded into it."""

    __slots__ = ("start", "total")

    def __init__(self, start: float) -> None:
        self.start = start
        self.total = 0.0

    def reset(self, start: float) -> None:
        self.start = start
        self.total = 0.0


class SampledRate:
    """The rate of recorded values per second over the last ``settings.num`` windows.

    ``last_recorded`` is when a value was last recorded (``-inf`` before the first): once
    ``settings.span_s`` has passed since, every sample is obsolete and the rate is as new.
    """

    __slots__ = ("_settings", "_samples", "_current", "last_recorded")

    def __init__(self, settings: WindowSettings) -> None:
        self._settings = settings
        self._samples: list[_Sample] = []
        self._current = 0
        self.last_recorded = float("-inf")

    def record(self, value: float, now: float) -> None:
        """Add ``value`` at time ``now`` (Kafka's ``SampledStat.record``)."""
        sample = self._current_sample(now)
        size = self._settings.size_s
        if now - sample.start >= size:
            previous_end = sample.start + size
            sample = self._advance(now)
            sample.reset(now - ((now - previous_end) % size))
        sample.total += value
        self.last_recorded = now

    def measure(self, now: float) -> float:
        """The rate at ``now``: the sum over the live samples divided by :meth:`window_s`."""
        return self.measure_with_window(now)[0]

    def window_s(self, now: float) -> float:
        """The elapsed window the rate is divided by, in seconds (Kafka's ``Rate.windowSize``).

        ``now`` minus the oldest live sample's start, raised to at least ``num - 1`` whole
        windows plus the elapsed part of the current one, and to at least 1 ms.
        """
        return self.measure_with_window(now)[1]

    def measure_with_window(self, now: float) -> tuple[float, float]:
        """``(rate, window_s)`` at ``now`` in one pass over the samples, resetting the obsolete ones."""
        settings = self._settings
        span = settings.span_s
        total = 0.0
        oldest = now
        for sample in self._samples:
            if now - sample.start >= span:
                sample.reset(now)
            else:
                total += sample.total
                if sample.start < oldest:
                    oldest = sample.start
        elapsed = now - oldest
        full_windows = int(elapsed // settings.size_s)
        if full_windows < settings.num - 1:
            elapsed += (settings.num - 1 - full_windows) * settings.size_s
        window = max(elapsed, MIN_WINDOW_S)
        return total / window, window

    def _current_sample(self, now: float) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now))
        return self._samples[self._current]

    def _advance(self, now: float) -> _Sample:
        """Move to the next sample of the ring, adding one while there are fewer than ``num``."""
        self._current = (self._current + 1) % self._settings.num
        if self._current >= len(self._samples):
            self._samples.append(_Sample(now))
        return self._samples[self._current]
