"""Configuration of the log storage (one value object shared by every partition).

Names and defaults follow Kafka's broker settings where the concept is the same;
each field's docstring names the Kafka setting it mirrors. LogConfig is immutable,
so one instance is safely shared by every thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from rill.client.clock import Clock

__all__ = ["Clock", "LogConfig", "MAX_SEGMENT_BYTES"]

MAX_SEGMENT_BYTES = 2**31 - 1  # positions inside a segment are 4-byte fields (KAFKA-6292)
MIN_SEGMENT_BYTES = 1024
MESSAGE_HEADER_BYTES = 6  # magic + attributes + crc: what a length field adds to a payload
_WEEK_MS = 168 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Settings of a partition log. Immutable; validated on construction.

    Raises:
        ValueError: a field is out of its range (the message names the field).
    """

    segment_bytes: int = 1_073_741_824
    """log.segment.bytes: roll the active segment before it would grow past this."""
    roll_ms: int = _WEEK_MS
    """log.roll.hours (in ms): roll a non-empty segment whose first append is this old."""
    flush_interval_messages: int = 10_000
    """log.flush.interval.messages: fsync after this many messages (M in seed 000)."""
    flush_interval_ms: int = 1000
    """log.flush.interval.ms: fsync unflushed data at least this often (S in seed 000)."""
    retention_ms: int = _WEEK_MS
    """log.retention.hours (in ms): delete segments last written longer ago; -1 keeps forever."""
    retention_bytes: int = -1
    """log.retention.bytes: delete oldest segments while the log stays above this; -1 = unlimited."""
    max_message_bytes: int = 1_000_000
    """message.max.bytes: the largest payload; a length field may be this plus 6."""
    index_interval_bytes: int = 4096
    """log.index.interval.bytes: bytes between two entries of a segment's sparse index."""
    index_interval_ms: int = 1000
    """log.index.interval.ms: an append this long after the last index entry gets an entry of its own."""
    retention_check_interval_ms: int = 300_000
    """log.retention.check.interval.ms: how often the background thread applies retention."""
    recovery_point_interval_ms: int = 60_000
    """log.flush.offset.checkpoint.interval.ms: how often a flush also persists the recovery point."""

    def __post_init__(self) -> None:
        _check_range("segment_bytes", self.segment_bytes, MIN_SEGMENT_BYTES, MAX_SEGMENT_BYTES)
        _check_range("roll_ms", self.roll_ms, 1, 2**63 - 1)
        _check_range("flush_interval_messages", self.flush_interval_messages, 1, 2**63 - 1)
        _check_range("flush_interval_ms", self.flush_interval_ms, 1, 2**63 - 1)
        if self.retention_ms != -1:
            _check_range("retention_ms", self.retention_ms, 1, 2**63 - 1)
        if self.retention_bytes != -1:
            _check_range("retention_bytes", self.retention_bytes, 0, 2**63 - 1)
        _check_range("max_message_bytes", self.max_message_bytes, 0,
                     MAX_SEGMENT_BYTES - 4 - MESSAGE_HEADER_BYTES)
        _check_range("index_interval_bytes", self.index_interval_bytes, 1, MAX_SEGMENT_BYTES)
        _check_range("index_interval_ms", self.index_interval_ms, 0, 2**63 - 1)
        _check_range("retention_check_interval_ms", self.retention_check_interval_ms, 1, 2**63 - 1)
        _check_range("recovery_point_interval_ms", self.recovery_point_interval_ms, 0, 2**63 - 1)

    @property
    def max_message_size(self) -> int:
        """The largest legal value of a message's length field (payload + 6 header bytes)."""
        return self.max_message_bytes + MESSAGE_HEADER_BYTES


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"LogConfig.{name} must be an int, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"LogConfig.{name} must be between {low} and {high}, got {value}")
