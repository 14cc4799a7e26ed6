"""Options of the ``rill`` data source, parsed and checked on the driver at planning time.

Spark hands every option as a string in a case-insensitive map. This module turns them
into typed values (:class:`ReadOptions`, :class:`WriteOptions`) and raises
:class:`SourceOptionError` with a message naming the option for anything malformed, so
a bad option fails the query before any task runs. Nothing here talks to a broker
(rill.client.spark.planning does that).

Offset specifications (``startingOffsets``, ``endingOffsets``) follow Spark's Kafka
source: ``earliest``, ``latest`` or JSON ``{"topic": {"0": 1234, "1": -2}}``, where
-2 means earliest and -1 latest. rill offsets are byte positions, so a number in the
JSON must be the offset of a message boundary.

The security options are the clients' settings (``security.protocol``, ``ssl.*``,
``sasl.*``), bare or prefixed ``kafka.`` as Spark's Kafka source passes client settings
(rill.client.spark.security_options); both kinds of options carry them, as strings, to
the executors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from rill.client.client_config import ConfigError
from rill.client.errors import RillError
from rill.client.spark.security_options import option_keys, security_settings
from rill.client.topic_names import is_valid_topic

__all__ = ["SourceOptionError", "ReadOptions", "WriteOptions", "OffsetSpec", "EARLIEST", "LATEST",
           "parse_read_options", "parse_write_options"]

EARLIEST = -2
LATEST = -1
DEFAULT_FETCH_BYTES = 4 * 1024 * 1024
DEFAULT_SPLIT_BYTES = 256 * 1024 * 1024

# What Spark itself may add to a source's options (writeStream passes checkpointLocation, save(path) passes path).
_SPARK_KEYS = {"checkpointlocation", "path"}
_BOOTSTRAP_KEYS = ("bootstrap", "bootstrap.servers", "kafka.bootstrap.servers")
_READ_KEYS = {"assign", "subscribe", "subscribepattern", "startingoffsets", "endingoffsets", "startingtimestamp",
              "maxoffsetspertrigger", "fetchbytes", "splitbytes", "minpartitions"}
_WRITE_KEYS = {"topic", "producer.linger.ms", "producer.batch.size", "producer.acks", "producer.compression.type"}


class SourceOptionError(RillError, ValueError):
    """An option of the ``rill`` data source that is missing, unknown or malformed."""


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where to start or end: ``default`` (EARLIEST or LATEST) for every partition, except
    the partitions named in ``per_partition`` (topic -> partition -> offset, -2 earliest,
    -1 latest). ``explicit_topics`` are the topics the JSON names."""

    default: int
    per_partition: Mapping[str, Mapping[int, int]]

    def offset_for(self, topic: str, partition: int) -> int:
        return self.per_partition.get(topic, {}).get(partition, self.default)


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """The read options after parsing; see docs/spark.md for each one."""

    bootstrap: str
    subscribe: tuple[str, ...]
    pattern: str | None
    assign: Mapping[str, tuple[int, ...]] | None
    starting: OffsetSpec
    ending: OffsetSpec
    starting_timestamp: int | None
    max_offsets_per_trigger: int | None
    fetch_bytes: int
    split_bytes: int
    min_partitions: int
    security: Mapping[str, str] = field(default_factory=dict)
    """The security settings by client key (``security.protocol``, ...); empty: PLAINTEXT."""


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """The write options after parsing: the target ``topic`` (None: a ``topic`` column
    names it per row) and the producer settings to pass on."""

    bootstrap: str
    topic: str | None
    producer: Mapping[str, str]
    security: Mapping[str, str] = field(default_factory=dict)
    """The security settings by client key, for the metadata connection and the producers."""


def _check_keys(options: Mapping[str, str], allowed: set[str]) -> None:
    known = allowed | _SPARK_KEYS | set(_BOOTSTRAP_KEYS) | option_keys()
    unknown = sorted(k for k in (key.lower() for key in options) if k not in known)
    if unknown:
        raise SourceOptionError(f"unknown option(s) {', '.join(unknown)} for the rill source; "
                                f"known: {', '.join(sorted(allowed | {'bootstrap'}))} and the security options "
                                f"kafka.security.protocol, kafka.ssl.*, kafka.sasl.*")


def _security(options: Mapping[str, str]) -> dict[str, str]:
    try:
        return security_settings(options)
    except ConfigError as exc:
        raise SourceOptionError(str(exc)) from None


def _bootstrap(options: Mapping[str, str]) -> str:
    for key in _BOOTSTRAP_KEYS:
        value = options.get(key)
        if value:
            return value.strip()
    raise SourceOptionError("option 'bootstrap' is required: the host:port of a rill broker")


def _positive(options: Mapping[str, str], key: str, default: int | None) -> int | None:
    text = options.get(key)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise SourceOptionError(f"option {key!r} must be a whole number, got {text!r}") from None
    if value <= 0:
        raise SourceOptionError(f"option {key!r} must be > 0, got {value}")
    return value


def _required_positive(options: Mapping[str, str], key: str, default: int) -> int:
    value = _positive(options, key, default)
    assert value is not None
    return value


def parse_offsets(option: str, text: str | None, default: int, *, allow_earliest: bool = True) -> OffsetSpec:
    """Parse ``earliest``, ``latest`` or the JSON form of ``option``.

    Raises:
        SourceOptionError: malformed JSON, a bad topic or partition, an offset below -2,
            or -2 where ``allow_earliest`` is false (``endingOffsets``).
    """
    if text is None:
        return OffsetSpec(default, {})
    word = text.strip().lower()
    if word == "earliest" and allow_earliest:
        return OffsetSpec(EARLIEST, {})
    if word == "latest":
        return OffsetSpec(LATEST, {})
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise SourceOptionError(f"option {option!r} must be 'earliest', 'latest' or JSON like "
                                f"{{\"topic\": {{\"0\": 1234}}}}, got {text!r} ({exc})") from None
    if not isinstance(parsed, dict):
        raise SourceOptionError(f"option {option!r}: the JSON must be an object of topics, got {text!r}")
    per: dict[str, dict[int, int]] = {}
    for topic, parts in parsed.items():
        if not is_valid_topic(topic) or not isinstance(parts, dict):
            raise SourceOptionError(f"option {option!r}: {topic!r} must be a topic name mapped to "
                                    f"{{\"partition\": offset}}")
        per[topic] = {}
        for part, offset in parts.items():
            if not str(part).isdigit() or isinstance(offset, bool) or not isinstance(offset, int):
                raise SourceOptionError(f"option {option!r}: partition {part!r} of {topic!r} needs a "
                                        f"partition number and a whole offset, got {offset!r}")
            if offset < EARLIEST or (offset == EARLIEST and not allow_earliest):
                allowed = "-1 (latest)" if not allow_earliest else "-2 (earliest), -1 (latest)"
                raise SourceOptionError(f"option {option!r}: offset {offset} of {topic}-{part} must be >= 0 "
                                        f"or {allowed}")
            per[topic][int(part)] = offset
    return OffsetSpec(default, per)


def _assign(text: str) -> dict[str, tuple[int, ...]]:
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not parsed or not all(
            is_valid_topic(t) and isinstance(ps, list) and all(isinstance(p, int) and p >= 0 for p in ps)
            for t, ps in parsed.items()):
        raise SourceOptionError(f"option 'assign' must be JSON like {{\"topic\": [0, 1]}}, got {text!r}")
    return {t: tuple(sorted(set(ps))) for t, ps in parsed.items()}


def _subscription(options: Mapping[str, str]) -> tuple[tuple[str, ...], str | None, dict[str, tuple[int, ...]] | None]:
    subscribe, pattern, assign = options.get("subscribe"), options.get("subscribePattern"), options.get("assign")
    if sum(x is not None for x in (subscribe, pattern, assign)) != 1:
        raise SourceOptionError("exactly one of the options 'subscribe' (comma-separated topics), "
                                "'subscribePattern' (a regular expression) and 'assign' (JSON "
                                "{\"topic\": [partitions]}) is required")
    if assign is not None:
        assigned = _assign(assign)
        return tuple(sorted(assigned)), None, assigned
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SourceOptionError(f"option 'subscribePattern': {pattern!r} is not a regular expression: "
                                    f"{exc}") from None
        return (), pattern, None
    assert subscribe is not None
    topics = tuple(t.strip() for t in subscribe.split(",") if t.strip())
    bad = [t for t in topics if not is_valid_topic(t)]
    if not topics or bad:
        raise SourceOptionError(f"option 'subscribe' must name topics of [A-Za-z0-9._-], got {subscribe!r}")
    return topics, None, None


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Parse and check the options of a batch (``streaming=False``) or streaming read.

    ``options`` must look keys up case-insensitively (Spark's map does). Defaults as in
    Spark's Kafka source: a batch reads from earliest to latest, a new stream starts at
    latest.

    Raises:
        SourceOptionError: the first problem found, naming the option.
    """
    _check_keys(options, _READ_KEYS)
    subscribe, pattern, assign = _subscription(options)
    starting = parse_offsets("startingOffsets", options.get("startingOffsets"), LATEST if streaming else EARLIEST)
    if streaming and options.get("endingOffsets") is not None:
        raise SourceOptionError("option 'endingOffsets' is for batch reads only; a stream has no end")
    ending = parse_offsets("endingOffsets", options.get("endingOffsets"), LATEST, allow_earliest=False)
    if not streaming and options.get("maxOffsetsPerTrigger") is not None:
        raise SourceOptionError("option 'maxOffsetsPerTrigger' is for streaming reads only")
    timestamp = None
    if options.get("startingTimestamp") is not None:
        if options.get("startingOffsets") is not None:
            raise SourceOptionError("give either 'startingOffsets' or 'startingTimestamp', not both")
        text = options["startingTimestamp"]
        if not text.strip().isdigit():
            raise SourceOptionError(f"option 'startingTimestamp' must be milliseconds since the epoch, got {text!r}")
        timestamp = int(text)
    return ReadOptions(
        bootstrap=_bootstrap(options), subscribe=subscribe, pattern=pattern, assign=assign, starting=starting, ending=ending,
        starting_timestamp=timestamp,
        max_offsets_per_trigger=_positive(options, "maxOffsetsPerTrigger", None),
        fetch_bytes=_required_positive(options, "fetchBytes", DEFAULT_FETCH_BYTES),
        split_bytes=_required_positive(options, "splitBytes", DEFAULT_SPLIT_BYTES),
        min_partitions=_required_positive(options, "minPartitions", 1), security=_security(options))


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Parse the options of a batch or streaming write.

    Raises:
        SourceOptionError: a missing bootstrap, an invalid topic name or an unknown option.
    """
    _check_keys(options, _WRITE_KEYS)
    topic = options.get("topic")
    if topic is not None and not is_valid_topic(topic):
        raise SourceOptionError(f"option 'topic': invalid topic name {topic!r}")
    producer = {k.lower()[len("producer."):]: v for k, v in options.items() if k.lower().startswith("producer.")}
    return WriteOptions(bootstrap=_bootstrap(options), topic=topic, producer=producer, security=_security(options))
