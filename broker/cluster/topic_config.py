"""A replicated topic's settings: which keys it may carry, and changing them at run time (issue 14).

The settings live in the ``config`` map of the topic's node, ``/rill/topics/[topic]``
(``replica_layout.TopicReplicas``), as strings. :data:`TOPIC_CONFIG` lists the keys a
topic accepts, at creation (Admin CreateTopic) and later (Admin AlterTopicConfig):

    min.insync.replicas             a whole number >= 1: acks=all produce needs this many in-sync replicas
    unclean.leader.election.enable  true or false: may an out-of-sync replica become leader
    retention.ms                    -1 or a whole number >= 1: the topic's time retention
    retention.bytes                 -1 or a whole number >= 0: its size retention, per partition
    segment.bytes                   1024..2147483647: its segment size

The last three are the topic's log settings (rill.broker.log.topic_log_settings): the
controller carries them in each LeaderAndIsr entry, and every broker applies them to its
replica's log at once. The internal topics (``__rill...``) refuse them: the groups topic
must keep everything.

:func:`alter_topic_config` is Kafka's IncrementalAlterConfigs for one topic: set some
keys, delete others, leave the rest. It reads the node, applies the change to what it
read, and writes it back conditionally on the node's zkVersion; when another writer got
in between (BadVersion) it reads again and re-applies, so two concurrent alters of
different keys both survive. Brokers learn the new settings from the controller, which
watches each topic node and sends the topic's partitions in a LeaderAndIsr
(``topic_config_watch``).

Functions of a started ``KazooClient``; no state; callable from any thread.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError

from rill.broker.log.topic_log_settings import LOG_SETTINGS
from rill.client.topic_names import is_internal_topic
from rill.client.zookeeper.replica_layout import TopicReplicas, is_replicated_topic_value, topic_path

__all__ = ["TOPIC_CONFIG", "ConfigChange", "InvalidTopicConfig", "NotReplicatedTopic", "alter_topic_config",
           "alteration_problem", "altered", "topic_config_problem"]

log = structlog.get_logger(__name__)

MAX_ATTEMPTS = 20  # conditional writes before giving up (each lost one means another writer succeeded)


def _positive_int(value: str) -> bool:
    text = value.strip()
    return text.isascii() and text.isdigit() and int(text) >= 1


def _boolean(value: str) -> bool:
    return value.strip().lower() in ("true", "false")


TOPIC_CONFIG: Mapping[str, tuple[Callable[[str], bool], str]] = {
    "min.insync.replicas": (_positive_int, "a whole number >= 1"),
    "unclean.leader.election.enable": (_boolean, "true or false"),
    **{key: (check, expected) for key, (_field, check, expected) in LOG_SETTINGS.items()},
}
"""The settings a replicated topic accepts: name -> (check, what it must be)."""


class InvalidTopicConfig(ValueError):
    """An alteration names an unknown key, gives a bad value, or sets and deletes one key."""


class NotReplicatedTopic(LookupError):
    """The topic does not exist, or is a Kafka 0.7-style topic (it has no settings)."""


@dataclass(frozen=True)
class ConfigChange:
    """What an alteration did: the settings before and after (equal when nothing changed)."""

    before: Mapping[str, str]
    after: Mapping[str, str]

    @property
    def changed(self) -> bool:
        return dict(self.before) != dict(self.after)


def topic_config_problem(config: Mapping[str, str], factor: int) -> str | None:
    """Why ``config`` cannot be a topic's settings (unknown key, bad value, factor 1); None when it can."""
    if config and factor == 1:
        return (f"topic settings ({', '.join(sorted(config))}) apply to replicated topics only: "
                "give a replication factor above 1")
    for key, value in sorted(config.items()):
        if key not in TOPIC_CONFIG:
            return f"unknown topic setting {key!r} (known: {', '.join(sorted(TOPIC_CONFIG))})"
        check, expected = TOPIC_CONFIG[key]
        if not check(value):
            return f"topic setting {key}={value!r} must be {expected}"
    return None


def alteration_problem(to_set: Mapping[str, str], to_delete: Collection[str]) -> str | None:
    """Why setting ``to_set`` and deleting ``to_delete`` is refused; None when it is acceptable.

    Refused: nothing to do, a key both set and deleted, an unknown key (set or deleted),
    a value its key does not accept.
    """
    if not to_set and not to_delete:
        return "nothing to alter: give settings to set or delete"
    both = sorted(set(to_set) & set(to_delete))
    if both:
        return f"topic setting(s) {', '.join(both)} both set and deleted"
    unknown = sorted(k for k in to_delete if k not in TOPIC_CONFIG)
    if unknown:
        return f"unknown topic setting {unknown[0]!r} (known: {', '.join(sorted(TOPIC_CONFIG))})"
    return topic_config_problem(to_set, factor=0)


def altered(config: Mapping[str, str], to_set: Mapping[str, str], to_delete: Collection[str]) -> dict[str, str]:
    """``config`` with ``to_set`` set (values stripped) and ``to_delete`` removed (absent keys are no-ops)."""
    result = {k: v for k, v in config.items() if k not in to_delete}
    result.update({k: v.strip() for k, v in to_set.items()})
    return result


def alter_topic_config(zk: KazooClient, topic: str, to_set: Mapping[str, str], to_delete: Collection[str], *,
                       max_attempts: int = MAX_ATTEMPTS) -> ConfigChange:
    """Set and delete settings of the replicated topic ``topic``, with a conditional write (see the module).

    Nothing is written when the settings would not change.

    Returns:
        The settings before and after, as written.

    Raises:
        InvalidTopicConfig: :func:`alteration_problem` refuses the change (nothing is read or written).
        NotReplicatedTopic: no such topic, or a 0.7-style one.
        InvalidTopic: an illegal topic name.
        ValueError: the topic node is malformed.
        TimeoutError: other writers won ``max_attempts`` times in a row (nothing written).
        KazooException: from ZooKeeper (the outcome of the write in flight is unknown: describe the topic).
    """
    problem = alteration_problem(to_set, to_delete)
    if problem is None and is_internal_topic(topic) and any(k in LOG_SETTINGS for k in [*to_set, *to_delete]):
        problem = f"topic {topic} is internal: its log settings are fixed (it keeps everything)"
    if problem is not None:
        raise InvalidTopicConfig(problem)
    path = topic_path(topic)
    for attempt in range(1, max_attempts + 1):
        try:
            data, stat = zk.get(path)
        except NoNodeError:
            raise NotReplicatedTopic(f"topic {topic} does not exist") from None
        if not is_replicated_topic_value(data):
            raise NotReplicatedTopic(f"topic {topic} is not a replicated topic (a 0.7-style topic has no settings)")
        current = TopicReplicas.decode(data)
        change = ConfigChange(dict(current.config), altered(current.config, to_set, to_delete))
        if not change.changed:
            return change
        try:
            zk.set(path, dataclasses.replace(current, config=change.after).encode(), version=stat.version)
        except BadVersionError:
            log.info("topic_config.write_lost", topic=topic, attempt=attempt, version=stat.version)
            continue
        except NoNodeError:
            raise NotReplicatedTopic(f"topic {topic} was deleted meanwhile") from None
        log.info("topic_config.altered", topic=topic, before=dict(change.before), after=dict(change.after))
        return change
    raise TimeoutError(f"topic {topic}: other writers changed its node {max_attempts} times in a row; try again")
