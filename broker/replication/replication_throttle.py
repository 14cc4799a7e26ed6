"""The replication throttle: how fast a broker may copy the replicas a reassignment adds (Kafka's KIP-73).

A reassignment's new replica starts empty and copies its leader's whole log. Unthrottled,
that copy takes all the bandwidth and disk the brokers have, and clients wait. The
throttle is one rate in bytes per second for the whole broker, set by the controller
(every LeaderAndIsr carries it; ``rill topics reassign --throttle``), and it applies only
to **throttled replicas**: followers this broker is adding (the role lists it among the
partition's ``adding_replicas``) that have not caught up with their leader yet. Followers
in the ISR are never throttled: throttling them would hold back the high watermark, so
every ``acks=all`` produce. Kafka throttles on both sides (leader and follower
``replication.throttled.rate``); rill throttles the follower alone, which is where one
rate per broker is simplest to keep: the fetches it sends for throttled replicas.

A token bucket that may go into debt: a fetcher asks whether a throttled replica may be
fetched now (:meth:`ReplicationThrottle.delay_s` is 0 while the bucket is not in debt),
caps the bytes it asks for at :meth:`ReplicationThrottle.fetch_size` (a tenth of a second's
worth), and records what it received (:meth:`ReplicationThrottle.record`). A leader
answers at least one whole message whatever the size asked (up to ``message.max.bytes``),
so a fetch may overshoot; the debt makes the next fetch wait, and the average rate over
any period longer than one fetch stays at the limit. The bucket holds at most a tenth of a
second of credit, so an idle throttle does not let a burst through.

Thread-safety: every method may be called from any thread (fetcher threads share one).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["ReplicationThrottle"]

BURST_S = 0.1  # credit the bucket may hold, and the size of one throttled fetch, in seconds of the rate
MIN_FETCH = 4096


class ReplicationThrottle:
    """One broker's throttle on the replicas it is adding (module docstring). Rate 0: none."""

    def __init__(self, bytes_per_second: int = 0, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._rate = 0
        self._tokens = 0.0
        self._at = clock()
        self.throttled_bytes = 0  # received for throttled replicas since start (for tests and logs)
        self.set_rate(bytes_per_second)

    @property
    def rate(self) -> int:
        """Bytes per second; 0 when there is no throttle."""
        return self._rate

    def set_rate(self, bytes_per_second: int) -> bool:
        """Use a new rate (0: none). True when it changed. Raises ValueError for a negative rate."""
        if bytes_per_second < 0:
            raise ValueError(f"a replication throttle must not be negative, not {bytes_per_second}")
        with self._lock:
            if bytes_per_second == self._rate:
                return False
            self._rate = bytes_per_second
            self._tokens, self._at = 0.0, self._clock()
            return True

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self._rate * BURST_S, self._tokens + (now - self._at) * self._rate)
        self._at = now

    def delay_s(self) -> float:
        """How long a throttled replica must wait before its next fetch (0: now, or no throttle)."""
        with self._lock:
            if self._rate <= 0:
                return 0.0
            self._refill()
            return 0.0 if self._tokens >= 0 else -self._tokens / self._rate

    def fetch_size(self, max_bytes: int) -> int:
        """The bytes a throttled replica's fetch asks for: ``max_bytes`` at most (no throttle: ``max_bytes``)."""
        rate = self._rate
        if rate <= 0:
            return max_bytes
        return max(1, min(max_bytes, max(MIN_FETCH, int(rate * BURST_S))))

    def record(self, nbytes: int) -> None:
        """``nbytes`` were received for throttled replicas (the bucket may go into debt)."""
        with self._lock:
            self.throttled_bytes += nbytes
            if self._rate > 0:
                self._refill()
                self._tokens -= nbytes
