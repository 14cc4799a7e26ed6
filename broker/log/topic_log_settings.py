"""A topic's own log settings over the broker's: ``retention.ms``, ``retention.bytes``, ``segment.bytes``.

A replicated topic may carry these in its settings (``/rill/topics/[topic]``'s ``config``,
rill.broker.cluster.topic_config), with Kafka's names and meanings. The controller sends
them with every LeaderAndIsr entry of the topic's partitions, so each broker applies them
to its replica's log (:func:`with_topic_settings` over the broker's own settings for that
log) as soon as they change, without a restart: a later roll uses the new segment size,
the next retention pass the new limits. Deleting a key goes back to the broker's setting.

    retention.ms      -1 (keep forever) or a whole number of milliseconds >= 1
    retention.bytes   -1 (no size limit) or a whole number of bytes >= 0
    segment.bytes     a whole number of bytes, 1024 .. 2147483647
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from rill.broker.log.log_config import MAX_SEGMENT_BYTES, MIN_SEGMENT_BYTES, LogConfig

__all__ = ["LOG_SETTINGS", "log_settings_of", "with_topic_settings"]


def _whole(text: str) -> int | None:
    text = text.strip()
    if text.startswith("-"):
        return -int(text[1:]) if text[1:].isascii() and text[1:].isdigit() else None
    return int(text) if text.isascii() and text.isdigit() else None


def _check(low: int, high: int, *, minus_one: bool) -> Callable[[str], bool]:
    def check(value: str) -> bool:
        number = _whole(value)
        return number is not None and ((minus_one and number == -1) or low <= number <= high)
    return check


LOG_SETTINGS: Mapping[str, tuple[str, Callable[[str], bool], str]] = {
    "retention.ms": ("retention_ms", _check(1, 2**63 - 1, minus_one=True), "-1 or a whole number >= 1"),
    "retention.bytes": ("retention_bytes", _check(0, 2**63 - 1, minus_one=True), "-1 or a whole number >= 0"),
    "segment.bytes": ("segment_bytes", _check(MIN_SEGMENT_BYTES, MAX_SEGMENT_BYTES, minus_one=False),
                      f"a whole number {MIN_SEGMENT_BYTES}..{MAX_SEGMENT_BYTES}"),
}
"""Topic setting -> (LogConfig field, check, what it must be)."""


def log_settings_of(config: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The log settings among a topic's settings, sorted (what a LeaderAndIsr entry carries)."""
    return tuple(sorted((k, v) for k, v in config.items() if k in LOG_SETTINGS))


def with_topic_settings(base: LogConfig, settings: Mapping[str, str] | tuple[tuple[str, str], ...]) -> LogConfig:
    """``base`` with the topic's log settings applied; keys not known or values not valid are ignored."""
    changes: dict[str, int] = {}
    for key, value in dict(settings).items():
        known = LOG_SETTINGS.get(key)
        if known is None or not known[1](value):
            continue
        number = _whole(value)
        assert number is not None
        changes[known[0]] = number
    return dataclasses.replace(base, **changes) if changes else base
