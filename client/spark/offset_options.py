"""Where a read starts and ends, as the options give it: offsets and times, parsed but not resolved.

Spark's Kafka source takes the start and end of a read in three forms, with this
priority (the first one set wins, as in Spark):

- ``startingTimestamp`` / ``endingTimestamp``: one time (ms since the epoch) for every partition;
- ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``: JSON ``{"topic": {"0": ms}}``;
- ``startingOffsets`` / ``endingOffsets``: ``earliest``, ``latest`` or JSON ``{"topic": {"0": offset}}``
  (-2 earliest, -1 latest).

This module parses them into :class:`OffsetSpec` and :class:`TimeSpec`; the planner
(rill.client.spark.planning, rill.client.spark.time_offsets) turns them into offsets.
rill offsets are byte positions, so a number in ``startingOffsets`` JSON must be the
offset of a message boundary. Nothing here talks to a broker.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rill.client.errors import RillError
from rill.client.topic_names import is_valid_topic

__all__ = ["SourceOptionError", "OffsetSpec", "TimeSpec", "EARLIEST", "LATEST", "parse_offsets", "parse_times",
           "TIME_STRATEGIES"]

EARLIEST = -2
LATEST = -1
TIME_STRATEGIES = ("error", "latest")  # startingOffsetsByTimestampStrategy, as Spark's


class SourceOptionError(RillError, ValueError):
    """An option of the ``rill`` data source that is missing, unknown or malformed."""


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where to start or end: ``default`` (EARLIEST or LATEST) for every partition, except
    the partitions named in ``per_partition`` (topic -> partition -> offset, -2 earliest,
    -1 latest)."""

    default: int
    per_partition: Mapping[str, Mapping[int, int]]

    def offset_for(self, topic: str, partition: int) -> int:
        return self.per_partition.get(topic, {}).get(partition, self.default)


@dataclass(frozen=True, slots=True)
class TimeSpec:
    """A start or end given as times (ms since the epoch): ``every`` for all partitions
    (``startingTimestamp``), or ``per_partition`` (``...OffsetsByTimestamp``), whose
    unnamed partitions take the offset spec's default (earliest or latest). ``option`` is
    the option's name, for messages."""

    option: str
    every: int | None
    per_partition: Mapping[str, Mapping[int, int]]

    def time_for(self, topic: str, partition: int) -> int | None:
        """The time of ``topic``-``partition``; None: the partition is not named (use the default)."""
        if self.every is not None:
            return self.every
        return self.per_partition.get(topic, {}).get(partition)


def _json_object(option: str, text: str, example: str) -> dict[str, Any]:
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise SourceOptionError(f"option {option!r} must be {example}, got {text!r} ({exc})") from None
    if not isinstance(parsed, dict):
        raise SourceOptionError(f"option {option!r}: the JSON must be an object of topics, got {text!r}")
    return parsed


def _per_partition(option: str, parsed: dict[str, Any], what: str) -> dict[str, dict[int, int]]:
    per: dict[str, dict[int, int]] = {}
    for topic, parts in parsed.items():
        if not is_valid_topic(topic) or not isinstance(parts, dict):
            raise SourceOptionError(f"option {option!r}: {topic!r} must be a topic name mapped to "
                                    f"{{\"partition\": {what}}}")
        per[topic] = {}
        for part, value in parts.items():
            if not str(part).isdigit() or isinstance(value, bool) or not isinstance(value, int):
                raise SourceOptionError(f"option {option!r}: partition {part!r} of {topic!r} needs a "
                                        f"partition number and a whole {what}, got {value!r}")
            per[topic][int(part)] = value
    return per


def parse_offsets(option: str, text: str | None, default: int, *, allow_earliest: bool = True,
                  allow_latest: bool = True) -> OffsetSpec:
    """Parse ``earliest``, ``latest`` or the JSON form of ``option``.

    ``allow_earliest`` is false for ``endingOffsets``, ``allow_latest`` false for a batch's
    ``startingOffsets`` (Spark refuses both: a batch would read nothing).

    Raises:
        SourceOptionError: malformed JSON, a bad topic or partition, an offset below -2,
            or a refused -2 / -1.
    """
    if text is None:
        return OffsetSpec(default, {})
    word = text.strip().lower()
    if word == "earliest" and allow_earliest:
        return OffsetSpec(EARLIEST, {})
    if word == "latest" and allow_latest:
        return OffsetSpec(LATEST, {})
    words = " or ".join(w for w, ok in (("'earliest'", allow_earliest), ("'latest'", allow_latest)) if ok)
    if word in ("earliest", "latest"):
        raise SourceOptionError(f"option {option!r} can't be {word} for batch queries (the read would be empty); "
                                f"use {words} or JSON like {{\"topic\": {{\"0\": 1234}}}}")
    parsed = _json_object(option, text, f"{words} or JSON like {{\"topic\": {{\"0\": 1234}}}}")
    per = _per_partition(option, parsed, "offset")
    for topic, parts in per.items():
        for part, offset in parts.items():
            refused = (offset < EARLIEST or (offset == EARLIEST and not allow_earliest)
                       or (offset == LATEST and not allow_latest))
            if refused:
                allowed = ", ".join(text for text, ok in (("-2 (earliest)", allow_earliest),
                                                          ("-1 (latest)", allow_latest)) if ok)
                raise SourceOptionError(f"option {option!r}: offset {offset} of {topic}-{part} must be >= 0"
                                        f"{' or ' + allowed if allowed else ''}")
    return OffsetSpec(default, per)


def _epoch_ms(option: str, text: str) -> int:
    if not text.strip().isdigit():
        raise SourceOptionError(f"option {option!r} must be milliseconds since the epoch, got {text!r}")
    return int(text)


def parse_times(options: Mapping[str, str], which: str) -> TimeSpec | None:
    """The ``{which}Timestamp`` or ``{which}OffsetsByTimestamp`` option (``which``: ``starting`` or
    ``ending``), the former first as in Spark; None when neither is given.

    Raises:
        SourceOptionError: a time that is not a whole number of ms >= 0, or malformed JSON.
    """
    every, by = f"{which}Timestamp", f"{which}OffsetsByTimestamp"
    if options.get(every) is not None:
        return TimeSpec(every, _epoch_ms(every, options[every]), {})
    text = options.get(by)
    if text is None:
        return None
    per = _per_partition(by, _json_object(by, text, "JSON like {\"topic\": {\"0\": 1700000000000}}"), "time in ms")
    for topic, parts in per.items():
        for part, ms in parts.items():
            if ms < 0:
                raise SourceOptionError(f"option {by!r}: the time of {topic}-{part} must be ms since the epoch "
                                        f"(>= 0), got {ms}")
    return TimeSpec(by, None, per)
