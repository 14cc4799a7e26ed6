"""The coordinator's configured bounds (Kafka's group.min/max.session.timeout.ms, group.max.size)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_SESSION_TIMEOUT_MS = 45_000  # Kafka's session.timeout.ms default since 3.0


@dataclass(frozen=True, slots=True)
class Limits:
    """Session (and rebalance) timeout bounds, in milliseconds, and the most members a group may have."""

    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 300_000
    max_group_size: int = 1_000

    def __post_init__(self) -> None:
        if not 0 < self.min_session_timeout_ms <= self.max_session_timeout_ms:
            raise ValueError(f"need 0 < min_session_timeout_ms <= max_session_timeout_ms, got "
                             f"{self.min_session_timeout_ms} and {self.max_session_timeout_ms}")
        if self.max_group_size < 1:
            raise ValueError(f"max_group_size must be at least 1, got {self.max_group_size}")

    def session_timeout_ok(self, ms: int) -> bool:
        return self.min_session_timeout_ms <= ms <= self.max_session_timeout_ms

    def rebalance_timeout_ok(self, ms: int) -> bool:
        """0 (meaning the session timeout) up to ``max_session_timeout_ms``.

        The bound is Kafka's rebalance timeout (max.poll.interval.ms) capped where a session
        timeout is: a larger one would keep a rebalance waiting for a member that is gone,
        and overflow the timer's wait. No lower bound beyond 0: a short one only drops slow
        members from a rebalance.
        """
        return 0 <= ms <= self.max_session_timeout_ms

    @property
    def default_session_timeout_ms(self) -> int:
        """45 s, moved inside the bounds: for CreateGroup without a timeout and implicit groups."""
        return min(max(DEFAULT_SESSION_TIMEOUT_MS, self.min_session_timeout_ms), self.max_session_timeout_ms)
