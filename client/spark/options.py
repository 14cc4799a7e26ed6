"""Options of the ``rill`` data source, parsed and checked on the driver at planning time.

Spark hands every option as a string in a case-insensitive map. This module turns them
into typed values (:class:`ReadOptions`, :class:`WriteOptions`) and raises
:class:`SourceOptionError` with a message naming the option for anything malformed, so
a bad option fails the query before any task runs. Nothing here talks to a broker
(rill.client.spark.planning does that). The source checks a read's options as soon as
Spark asks for its schema, at ``load()`` (rill.client.spark.source).

Option names and meanings are Spark's Kafka source's (docs/spark.md lists them, with
rill's precision). The start and end of a read (offsets, times) are parsed in
rill.client.spark.offset_options; the micro-batch limits (``maxOffsetsPerTrigger`` in
messages, ``maxBytesPerTrigger``, ``minOffsetsPerTrigger`` with ``maxTriggerDelay``) are
applied by rill.client.spark.trigger_limits.

Connection options take Spark's ``kafka.`` aliases: ``kafka.bootstrap.servers`` for
``bootstrap``, ``kafka.max.partition.fetch.bytes`` for ``fetchBytes``, and the security
options (``security.protocol``, ``ssl.*``, ``sasl.*``), bare or prefixed ``kafka.``
(rill.client.spark.security_options); both kinds of options carry them, as strings, to
the executors.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from rill.client.client_config import ConfigError
from rill.client.spark.offset_options import EARLIEST, LATEST, TIME_STRATEGIES, OffsetSpec, SourceOptionError
from rill.client.spark.offset_options import TimeSpec, parse_offsets, parse_times
from rill.client.spark.security_options import option_keys, security_settings
from rill.client.topic_names import is_valid_topic

__all__ = ["SourceOptionError", "ReadOptions", "WriteOptions", "OffsetSpec", "TimeSpec", "EARLIEST", "LATEST",
           "parse_read_options", "parse_write_options", "parse_offsets"]

DEFAULT_FETCH_BYTES = 4 * 1024 * 1024
DEFAULT_SPLIT_BYTES = 256 * 1024 * 1024
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000  # Spark's "15m"

# What Spark itself may add to a source's options (writeStream passes checkpointLocation, save(path) passes path).
_SPARK_KEYS = {"checkpointlocation", "path"}
_BOOTSTRAP_KEYS = ("bootstrap", "bootstrap.servers", "kafka.bootstrap.servers")
_FETCH_KEYS = ("fetchBytes", "kafka.max.partition.fetch.bytes")
_READ_KEYS = {"assign", "subscribe", "subscribepattern", "startingoffsets", "endingoffsets", "startingtimestamp",
              "endingtimestamp", "startingoffsetsbytimestamp", "endingoffsetsbytimestamp",
              "startingoffsetsbytimestampstrategy", "failondataloss", "maxoffsetspertrigger", "maxbytespertrigger",
              "minoffsetspertrigger", "maxtriggerdelay", "maxrecordsperpartition", "includeheaders",
              "fetchbytes", "kafka.max.partition.fetch.bytes", "splitbytes", "minpartitions"}
_STREAM_ONLY = ("maxOffsetsPerTrigger", "maxBytesPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")
_BATCH_ONLY = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
_WRITE_KEYS = {"topic", "producer.linger.ms", "producer.batch.size", "producer.acks", "producer.compression.type"}
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$")
_DURATION_MS = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """The read options after parsing; see docs/spark.md for each one."""

    bootstrap: str
    subscribe: tuple[str, ...]
    pattern: str | None
    assign: Mapping[str, tuple[int, ...]] | None
    starting: OffsetSpec
    ending: OffsetSpec
    starting_times: TimeSpec | None
    """``startingTimestamp`` or ``startingOffsetsByTimestamp`` (they win over ``startingOffsets``)."""
    max_offsets_per_trigger: int | None
    """Messages per micro-batch (Spark's meaning); None: no cap."""
    fetch_bytes: int
    split_bytes: int
    min_partitions: int
    security: Mapping[str, str] = field(default_factory=dict)
    """The security settings by client key (``security.protocol``, ...); empty: PLAINTEXT."""
    ending_times: TimeSpec | None = None
    """``endingTimestamp`` or ``endingOffsetsByTimestamp`` (batch; they win over ``endingOffsets``)."""
    time_strategy: str = "error"
    """``startingOffsetsByTimestampStrategy``: ``error`` or ``latest`` for a start time past a log's end."""
    fail_on_data_loss: bool = True
    """False: skip offsets deleted by retention with a warning, rather than fail."""
    max_bytes_per_trigger: int | None = None
    """Bytes per micro-batch (rill's byte cap); None: no cap."""
    min_offsets_per_trigger: int | None = None
    """Messages a micro-batch waits for, up to ``max_trigger_delay_ms``; None: no wait."""
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    max_records_per_partition: int | None = None
    """Split a partition's range into tasks of about this many messages; None: only ``splitBytes``."""


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


def _boolean(options: Mapping[str, str], key: str, default: bool) -> bool:
    text = options.get(key)
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise SourceOptionError(f"option {key!r} must be true or false, got {text!r}")
    return text.strip().lower() == "true"


def _duration_ms(options: Mapping[str, str], key: str, default: int) -> int:
    """A duration as Spark writes it: ``500ms``, ``30s``, ``15m``, ``1h``, ``1d`` or a number of ms."""
    text = options.get(key)
    if text is None:
        return default
    match = _DURATION.match(text.lower())
    if match is None:
        raise SourceOptionError(f"option {key!r} must be a duration such as 30s, 5m or 500ms, got {text!r}")
    return int(match.group(1)) * _DURATION_MS[match.group(2)]


def _alias(options: Mapping[str, str], keys: tuple[str, ...]) -> str | None:
    """The value of the first of ``keys`` given; two of them with different values are refused."""
    given = {key: options[key].strip() for key in keys if options.get(key) is not None}
    if len(set(given.values())) > 1:
        raise SourceOptionError(f"options {' and '.join(repr(k) for k in given)} name the same setting with "
                                f"different values; give one")
    return next(iter(given.values()), None)


def _check_mode(options: Mapping[str, str], streaming: bool | None) -> None:
    """Refuse what cannot be in this kind of read (``streaming`` None: not known yet, nothing to refuse)."""
    if streaming is None:
        return
    wrong = _BATCH_ONLY if streaming else _STREAM_ONLY
    for key in wrong:
        if options.get(key) is not None:
            raise SourceOptionError(f"option {key!r} is for {'batch' if streaming else 'streaming'} reads only"
                                    + ("; a stream has no end" if streaming else ""))


def _refuse_headers(options: Mapping[str, str]) -> None:
    if _boolean(options, "includeHeaders", False):
        raise SourceOptionError("option 'includeHeaders' cannot be true for rill: the Kafka 0.7 message format "
                                "has no record headers (nor keys), so there is no headers column to add")


def parse_read_options(options: Mapping[str, str], *, streaming: bool | None) -> ReadOptions:
    """Parse and check the options of a batch (``streaming=False``) or streaming read, or of a read whose
    kind is not known yet (``None``: at ``load()``, where Spark asks for the schema; the options only a
    batch or only a stream takes are then checked later).

    ``options`` must look keys up case-insensitively (Spark's map does). Defaults as in
    Spark's Kafka source: a batch reads from earliest to latest, a new stream starts at
    latest.

    Raises:
        SourceOptionError: the first problem found, naming the option.
    """
    _check_keys(options, _READ_KEYS)
    _refuse_headers(options)
    _check_mode(options, streaming)
    subscribe, pattern, assign = _subscription(options)
    starting = parse_offsets("startingOffsets", options.get("startingOffsets"), LATEST if streaming else EARLIEST,
                             allow_latest=streaming is not False)
    ending = parse_offsets("endingOffsets", options.get("endingOffsets"), LATEST, allow_earliest=False)
    strategy = (options.get("startingOffsetsByTimestampStrategy") or "error").strip().lower()
    if strategy not in TIME_STRATEGIES:
        raise SourceOptionError(f"option 'startingOffsetsByTimestampStrategy' must be error or latest, "
                                f"got {strategy!r}")
    fetch = _alias(options, _FETCH_KEYS)
    return ReadOptions(
        bootstrap=_bootstrap(options), subscribe=subscribe, pattern=pattern, assign=assign, starting=starting,
        ending=ending, starting_times=parse_times(options, "starting"), ending_times=parse_times(options, "ending"),
        time_strategy=strategy, fail_on_data_loss=_boolean(options, "failOnDataLoss", True),
        max_offsets_per_trigger=_positive(options, "maxOffsetsPerTrigger", None),
        max_bytes_per_trigger=_positive(options, "maxBytesPerTrigger", None),
        min_offsets_per_trigger=_positive(options, "minOffsetsPerTrigger", None),
        max_trigger_delay_ms=_duration_ms(options, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS),
        max_records_per_partition=_positive(options, "maxRecordsPerPartition", None),
        fetch_bytes=(_required_positive({"fetchBytes": fetch}, "fetchBytes", DEFAULT_FETCH_BYTES) if fetch
                     else DEFAULT_FETCH_BYTES),
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
