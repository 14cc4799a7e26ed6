"""The arguments of ``rill groups rewind`` (``reset-offsets``) in kafka-consumer-groups' formats. Pure functions.

- ``--to-datetime``: Kafka's ``YYYY-MM-DDTHH:mm:SS.sss`` or any ISO 8601 time
  (``2026-11-20T09:00:00Z``, ``...+01:00``, a date alone). Without a zone it is local
  time, as Kafka reads it.
- ``--by-duration``: Kafka's ``PnDTnHnMnS`` (``PT1H``, ``P1DT12H``, ``PT0.5S``) or the short
  ``1h30m`` / ``-1h`` / ``2d`` / ``90s`` / ``500ms``; always that long before now (a leading
  ``-`` or ``+`` changes nothing: a rewind target is in the past).
- ``--topic T``, ``--topic T:0,2``: a topic, or some of its partitions (Kafka's ``topic1:0,1,2``).

argparse reads an argument that starts with ``-`` as an option, so ``--by-duration -1h``
would fail; :func:`join_dash_values` rewrites it to ``--by-duration=-1h`` before parsing.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Sequence
from datetime import datetime

from rill.client.topic_names import MAX_TOPIC_LENGTH, is_valid_topic

__all__ = ["DASH_VALUE_OPTIONS", "duration_ms", "join_dash_values", "parse_datetime_ms", "parse_duration_ms",
           "topic_spec"]

DASH_VALUE_OPTIONS = ("--by-duration",)
_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)"
_ISO = re.compile(rf"P(?:{_NUMBER}D)?(?:T(?:{_NUMBER}H)?(?:{_NUMBER}M)?(?:{_NUMBER}S)?)?", re.IGNORECASE)
_SHORT_PART = re.compile(rf"{_NUMBER}(ms|[smhd])", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DASH_VALUE = re.compile(r"-[0-9.pP]")


def duration_ms(text: str) -> int:
    """The length of a duration in milliseconds (the sign is ignored).

    Raises:
        argparse.ArgumentTypeError: neither Kafka's PnDTnHnMnS nor the short form.
    """
    body = text.strip().lstrip("+-")
    iso = _ISO.fullmatch(body)
    if iso and body.upper() not in ("P", "PT") and not body.upper().endswith("T"):
        days, hours, minutes, seconds = (float(g) if g else 0.0 for g in iso.groups())
        return round(((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000)
    parts = list(_SHORT_PART.finditer(body))
    if body and parts and "".join(p.group(0) for p in parts) == body:
        return round(sum(float(p.group(1)) * _UNIT_MS[p.group(2).lower()] for p in parts))
    raise argparse.ArgumentTypeError(
        f"not a duration: {text!r} (Kafka's PnDTnHnMnS as PT1H or P1DT12H, or 1h30m, -1h, 2d, 90s, 500ms)")


def parse_duration_ms(text: str, now: float | None = None) -> int:
    """The time ``text`` (a duration) before ``now`` (default: the current time), in ms since the epoch."""
    length = duration_ms(text)
    return int((time.time() if now is None else now) * 1000) - length


def parse_datetime_ms(text: str) -> int:
    """A time in ms since the epoch: Kafka's ``YYYY-MM-DDTHH:mm:SS.sss`` or ISO 8601; local time without a zone.

    Raises:
        argparse.ArgumentTypeError: not such a time.
    """
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a date and time: {text!r} (YYYY-MM-DDTHH:mm:SS.sss, local time, or ISO 8601 with a zone, "
            "e.g. 2026-11-20T09:00:00Z)") from None
    return int(moment.timestamp() * 1000)  # a naive time is local time, as Kafka reads one


def topic_spec(text: str) -> tuple[str, tuple[int, ...]]:
    """argparse type for ``TOPIC`` or ``TOPIC:P[,P...]``: (topic, partitions; empty for every partition)."""
    topic, sep, listed = text.partition(":")
    if not is_valid_topic(topic):
        raise argparse.ArgumentTypeError(
            f"invalid topic name {topic!r}: use 1-{MAX_TOPIC_LENGTH} of [A-Za-z0-9._-], not '.' or '..'")
    if not sep:
        return topic, ()
    try:
        partitions = tuple(int(p) for p in listed.split(",") if p.strip())
    except ValueError:
        partitions = ()
    if not partitions or any(p < 0 for p in partitions):
        raise argparse.ArgumentTypeError(f"expected TOPIC or TOPIC:P[,P...] (e.g. orders:0,2), got {text!r}")
    return topic, tuple(sorted(set(partitions)))


def join_dash_values(argv: Sequence[str], options: Sequence[str] = DASH_VALUE_OPTIONS) -> list[str]:
    """``argv`` with ``OPTION -1h`` written ``OPTION=-1h`` for each of ``options``, so argparse reads ``-1h``
    (or ``-PT1H``) as the option's value instead of an unknown option."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in options and i + 1 < len(argv) and _DASH_VALUE.match(argv[i + 1]):
            out.append(f"{arg}={argv[i + 1]}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out
