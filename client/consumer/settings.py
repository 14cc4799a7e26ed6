"""The consumer's settings: Kafka's names and, where the concept is Kafka's, its defaults.

``Consumer({"group.id": "app"}, auto_offset_reset="latest")``: dotted keys in a
mapping, or the same keys with underscores as keyword arguments (keywords win).
See :mod:`rill.client.client_config` for the rules; unknown keys raise ConfigError.

The constructor's positional arguments (:func:`split_arguments`) are topic names, then
at most one such mapping, last: ``Consumer("a", "b", {"group.id": "app"})``,
``Consumer("a", "b", group_id="app")`` (kafka-python's ``KafkaConsumer(*topics,
**configs)``) and ``Consumer({"group.id": "app"})`` all work.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rill.client.client_config import (ConfigError, Setting, boolean, choice, non_negative, optional_callable, positive,
                                resolve, servers)
from rill.client.security.client_security import SECURITY_SETTINGS

ASSIGNMENT_STRATEGIES = ("range", "roundrobin", "sticky")
OFFSET_RESETS = ("earliest", "latest", "none")


def _timeout_or_forever(value: Any) -> int:
    """Milliseconds >= 0, or -1 for forever (Kafka 0.7's default; kafka-python's ``float('inf')`` and None too)."""
    if value is None or value == float("inf"):
        return -1
    if isinstance(value, bool):
        raise TypeError(f"expected milliseconds, got {value!r}")
    number = int(value)
    if number < -1:
        raise ValueError(f"must be >= 0, or -1 for forever, got {number}")
    return number


def _optional_group(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty group name or None, got {value!r}")
    return value


SETTINGS: tuple[Setting, ...] = (
    Setting("bootstrap.servers", [("localhost", 9092)], "host:port of one or more brokers (data-plane port)",
            servers),
    Setting("group.id", None, "consumer group; None: no group (the consumer reads every partition of its subscription "
            "itself, no commits)",
            _optional_group),
    Setting("client.id", "rill-consumer", "name sent to the coordinator; member ids start with it", str),
    Setting("auto.offset.reset", "earliest", "where to start without a committed offset, or after "
            "OffsetOutOfRange: earliest, latest or none (raise)", choice(*OFFSET_RESETS)),
    Setting("enable.auto.commit", True, "commit the positions of earlier polls every auto.commit.interval.ms",
            boolean),
    Setting("auto.commit.interval.ms", 5000, "how often poll() auto-commits", positive(int)),
    Setting("session.timeout.ms", 10_000, "the coordinator evicts a member silent for this long "
            "(broker bounds: group.min/max.session.timeout.ms, 6000..300000 by default)", positive(int)),
    Setting("heartbeat.interval.ms", 3000, "time between heartbeats sent from poll()", positive(int)),
    Setting("fetch.max.bytes", 1_048_576, "most bytes of messages one fetch response may carry, "
            "shared by its partitions", positive(int)),
    Setting("max.partition.fetch.bytes", 1_048_576, "most bytes of messages fetched per partition per fetch",
            positive(int)),
    Setting("fetch.max.wait.ms", 500, "how long the broker holds a fetch waiting for fetch.min.bytes",
            non_negative(int)),
    Setting("fetch.min.bytes", 1, "bytes the broker waits for before answering a fetch", positive(int)),
    Setting("max.poll.records", 500, "most messages one poll() returns", positive(int)),
    Setting("consumer.timeout.ms", -1, "iteration (for message in consumer) stops after this long without a "
            "message; -1: never (kafka-python's consumer_timeout_ms)", _timeout_or_forever),
    Setting("assignment.strategy", "range", "how the coordinator divides partitions (used when this "
            "consumer creates the group): range, roundrobin or sticky", choice(*ASSIGNMENT_STRATEGIES)),
    Setting("request.timeout.ms", 30_000, "deadline of a request to a broker or the coordinator",
            positive(int)),
    Setting("retry.backoff.ms", 100, "wait before retrying a failed request", non_negative(int)),
    Setting("metadata.max.age.ms", 30_000, "refresh metadata this often (subscribe(pattern=...) sees new "
            "topics)", positive(int)),
    Setting("value.deserializer", None, "callable applied to each message value (None: bytes)",
            optional_callable),
    Setting("key.deserializer", None, "callable applied to each message key that is not None",
            optional_callable),
    *SECURITY_SETTINGS,
)


def consumer_settings(config: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Resolve the consumer's settings (defaults, then ``config``, then ``kwargs``).

    Raises:
        ConfigError: an unknown key or a bad value.
    """
    values = resolve(SETTINGS, config, kwargs)
    if values["heartbeat.interval.ms"] >= values["session.timeout.ms"]:
        raise ConfigError(f"heartbeat.interval.ms ({values['heartbeat.interval.ms']}) must be below "
                          f"session.timeout.ms ({values['session.timeout.ms']})")
    return values


def split_arguments(args: Sequence[Any], config: Mapping[str, Any] | None) -> tuple[list[str], Mapping[str, Any] | None]:
    """The constructor's positional ``args`` as ``(topics, config)``: topic names, then at most one config, last.

    The config is a Mapping of settings (or None); it may be given as the ``config``
    keyword instead, not both. Topic names are checked later, by ``subscribe()``.

    Raises:
        TypeError: a positional argument that is neither a topic name (str) nor, last, the
            config; a config before a topic or given twice.
    """
    topics: list[str] = []
    for index, arg in enumerate(args):
        last = index == len(args) - 1
        if isinstance(arg, str):
            topics.append(arg)
        elif (arg is None or isinstance(arg, Mapping)) and last:
            if config is not None:
                raise TypeError("Consumer() got the config twice: as a positional mapping and as config=")
            config = arg
        elif arg is None or isinstance(arg, Mapping):
            raise TypeError(f"Consumer() takes topic names first, then at most one config mapping, last; got "
                            f"{type(arg).__name__} at position {index + 1} of {len(args)}: "
                            "Consumer('topic', ..., {'group.id': ...}) or keywords (group_id=...)")
        else:
            hint = " (pass topics as separate arguments: Consumer(*topics, ...))" \
                if isinstance(arg, (list, tuple, set, frozenset)) else ""
            raise TypeError(f"Consumer() positional arguments are topic names (str) and, last, a config "
                            f"mapping; got {type(arg).__name__} {arg!r}{hint}")
    return topics, config
