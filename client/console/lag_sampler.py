"""The console's own samples: every group's lag and every partition's end offset, taken while it runs.

A :class:`LagSampler` thread takes one round every ``interval`` seconds (the first at
once), and keeps what it saw for ``window`` seconds (``--lag-window-seconds``), in
bounded :class:`~rill.client.console.sample_series.TimeSeries`:

- per group, a :class:`LagPoint`: the group's lag in bytes summed over its partitions and
  its largest lag in seconds, from Admin DescribeGroup at the group's coordinator (the
  coordinator computes both: docs/groups.md); the lag charts are drawn from these;
- per partition, its end offset from Admin DescribeTopics; the append rate (bytes/s,
  offsets being byte positions) is the growth of the end over the last
  :data:`RATE_SPAN_S` seconds (:func:`~rill.client.console.sample_series.rate`).

Nothing is kept from before the console started, and a group or partition that
disappears is forgotten at the next round. A round that fails (a broker down, the ACLs
refusing) records its errors in :meth:`LagSampler.status` and the next round tries
again: the thread never dies of a cluster failure.

Thread-safe: the sampler's thread writes, the pages read, under one lock.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import structlog

from rill.client.console.cluster_access import ClusterAccess
from rill.client.console.console_errors import problem_of
from rill.client.console.sample_series import TimeSeries, rate
from rill.client.errors import RillError
from rill.v1 import admin_pb2 as apb

__all__ = ["LagPoint", "LagSampler", "RATE_SPAN_S", "SamplerStatus", "lag_totals"]

log = structlog.get_logger(__name__)

_K = TypeVar("_K")
_V = TypeVar("_V")

RATE_SPAN_S = 30.0
"""The append rate is measured over the samples of the last 30 seconds (fewer while the console starts)."""


@dataclass(frozen=True)
class LagPoint:
    """A group's lag at one moment: bytes behind, summed over its partitions, and the oldest unconsumed message's
    age in seconds (the largest of its partitions'); None where no partition's lag is known."""

    lag_bytes: int | None
    lag_seconds: float | None


@dataclass(frozen=True)
class SamplerStatus:
    """How sampling goes: rounds taken, when the last one ended (time.time(), 0: none yet) and its errors."""

    rounds: int
    last_round: float
    errors: tuple[str, ...]


def lag_totals(partitions: Iterable[apb.PartitionLag]) -> LagPoint:
    """A group's :class:`LagPoint` from DescribeGroup's partitions (-1, unknown, is left out)."""
    rows = list(partitions)
    known_bytes = [p.lag_bytes for p in rows if p.lag_bytes >= 0]
    known_seconds = [p.lag_seconds for p in rows if p.lag_seconds >= 0]
    return LagPoint(sum(known_bytes) if known_bytes else None, max(known_seconds) if known_seconds else None)


class LagSampler:
    """Samples lag and end offsets every ``interval`` seconds for a ``window`` of seconds; see the module docstring."""

    def __init__(self, access: ClusterAccess, interval: float, window: float,
                 clock: Callable[[], float] = time.time) -> None:
        if interval <= 0 or window < interval:
            raise ValueError("need 0 < interval <= window")
        self.access = access
        self.interval = interval
        self.window = window
        self.clock = clock
        self._maxlen = int(window / interval) + 2
        self._lock = threading.Lock()
        self._lag: dict[str, TimeSeries[LagPoint]] = {}
        self._ends: dict[tuple[str, int], TimeSeries[int]] = {}
        self._status = SamplerStatus(0, 0.0, ())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._round_done = threading.Condition(self._lock)

    # ---------------------------------------------------------------- the thread

    def start(self) -> None:
        """Start sampling on a daemon thread (the first round at once)."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="rill-console-sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread; a round under way finishes first (each call is bounded by ``--timeout``)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        next_round = time.monotonic()
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception as exc:  # noqa: BLE001 - a bug must not end sampling; it is logged with its traceback
                log.error("console.sampler_failed", error=repr(exc), exc_info=exc)
            next_round = max(next_round + self.interval, time.monotonic())
            self._stop.wait(next_round - time.monotonic())

    def wait_for_rounds(self, rounds: int, timeout: float) -> bool:
        """Wait until ``rounds`` rounds have been taken in all (tests, and pages that want a first sample)."""
        with self._round_done:
            return self._round_done.wait_for(lambda: self._status.rounds >= rounds, timeout)

    # ---------------------------------------------------------------- one round

    def sample_once(self) -> None:
        """One round: every partition's end offset and every group's lag, recorded at the current time."""
        now = self.clock()
        errors: list[str] = []
        ends = self._sample_ends(errors)
        lags = self._sample_lags(errors)
        with self._lock:
            if ends is not None:
                self._ends = self._record(self._ends, ends, now)
            if lags is not None:
                self._lag = self._record(self._lag, lags, now)
            self._status = SamplerStatus(self._status.rounds + 1, self.clock(), tuple(errors))
            self._round_done.notify_all()

    def _sample_ends(self, errors: list[str]) -> dict[tuple[str, int], int | None] | None:
        """Each partition's end offset (None: unknown now, offline), or None when the call failed."""
        try:
            topics = self.access.admin_call(lambda admin: admin.describe_topics()).topics
        except RillError as exc:
            errors.append(f"topics: {problem_of(exc).message}")
            return None
        return {(t.topic, p.partition): p.end_offset if p.end_offset >= 0 else None for t in topics
                if not t.error_code for p in t.partitions}

    def _sample_lags(self, errors: list[str]) -> dict[str, LagPoint | None] | None:
        """Each group's lag (None: not described this round), or None when ListGroups failed."""
        try:
            groups = self.access.admin_call(lambda admin: admin.list_groups()).groups_info
        except RillError as exc:
            errors.append(f"groups: {problem_of(exc).message}")
            return None
        lags: dict[str, LagPoint | None] = {}
        brokers = functools.cache(lambda: self.access.metadata().brokers)  # asked once a round, if at all
        for info in groups:
            lags[info.group_name] = None  # its history is kept while it is listed, sampled or not
            if info.error_code:
                continue
            try:
                described = self.access.coordinator(info, brokers).describe_group(info.group_name)
            except RillError as exc:
                errors.append(f"group {info.group_name}: {problem_of(exc).message}")
                continue
            if not described.error_code:  # NOT_COORDINATOR: moving, sampled again next round
                lags[info.group_name] = lag_totals(described.partitions)
        return lags

    def _record(self, series: dict[_K, TimeSeries[_V]], values: dict[_K, _V | None],
                now: float) -> dict[_K, TimeSeries[_V]]:
        """``series`` with each known value appended; a key no longer listed is dropped (a deleted group or
        partition), one listed without a value (offline, a failed call) keeps its samples."""
        kept = {key: series.get(key) or TimeSeries[_V](self.window, self._maxlen) for key in values}
        for key, value in values.items():
            if value is not None:
                kept[key].add(now, value)
        return kept

    # ---------------------------------------------------------------- what the pages read

    def lag_history(self, group: str) -> list[tuple[float, LagPoint]]:
        """The group's samples, oldest first (empty: none yet, or the group is gone)."""
        with self._lock:
            found = self._lag.get(group)
            return found.points() if found is not None else []

    def latest_lag(self, group: str) -> LagPoint | None:
        """The group's newest sample, or None."""
        with self._lock:
            found = self._lag.get(group)
            last = found.last() if found is not None else None
            return last[1] if last is not None else None

    def append_rate(self, topic: str, partition: int) -> float | None:
        """Bytes per second appended to the partition lately (None: fewer than two samples yet)."""
        with self._lock:
            found = self._ends.get((topic, partition))
            return rate(found, RATE_SPAN_S) if found is not None else None

    def topic_rate(self, topic: str, partitions: Sequence[int]) -> float | None:
        """The topic's append rate: the sum of its partitions' (None when none is known yet)."""
        rates = [r for r in (self.append_rate(topic, p) for p in partitions) if r is not None]
        return sum(rates) if rates else None

    def status(self) -> SamplerStatus:
        with self._lock:
            return self._status

