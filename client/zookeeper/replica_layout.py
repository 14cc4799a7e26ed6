"""rill's ZooKeeper layout for replicated topics: paths, value types, their bytes.

Kafka 0.8+'s layout (ZkData.scala), kept under ``/rill`` beside the 0.7 nodes::

    /rill/topics/[topic]                          persistent
        {"version":2,"replicas":[[1,2,3],[2,3,1]],"config":{"min.insync.replicas":"2"}}
        while partitions move (reassignment, Kafka 2.4's layout), version 3:
        {"version":3,"replicas":[[2,3,4,1],[2,3,1]],"adding_replicas":{"0":[4]},"removing_replicas":{"0":[1]}}
    /rill/topics/[topic]/partitions/[p]/state     persistent
        {"controller_epoch":7,"leader":1,"version":1,"leader_epoch":3,"isr":[1,3,2]}
    /rill/controller                              ephemeral
        {"version":1,"brokerid":1,"timestamp":"1700000000000"}
    /rill/controller_epoch                        persistent
        7
    /rill/admin/replication_throttle              persistent (written by the controller)
        {"version":1,"bytes_per_second":50000000}
    /rill/admin/delete_topics/[topic]             persistent, empty (Kafka's /admin/delete_topics/[topic]):
        the topic is marked for deletion; the controller removes it with the topic's nodes

A topic node holds either a Kafka-0.7-style partition map (``{"partitions": ...}``,
``rill.client.zookeeper.registry``) or a replicated topic's assignment, never both;
:func:`is_replicated_topic_value` tells them apart. In ``replicas`` the index is the
partition number and each list holds the replica broker ids in assignment order (the
first is the preferred leader). While a partition is being reassigned (moved to other
brokers) its list is the target replicas followed by those leaving, and
``adding_replicas``/``removing_replicas`` (keyed by the partition number as a string, as
Kafka writes them) name the replicas joining and leaving; a node carrying them is
``"version":3``, one without is still written as version 2. ``config`` is optional and, as in Kafka's
``/config/topics``, maps names to string values. In a state, ``leader`` is -1 when the
partition has no leader; the compare-and-set token of a state is its znode's
``Stat.version`` (the "zkVersion"), not the JSON ``"version"`` field.

Anyone can write ZooKeeper, so every decoder is strict: malformed JSON, a duplicate
key, an unknown or missing field, a wrong type (``true`` is not a number), an id or
epoch outside 0..2**31-1, a replica listed twice in one partition, partitions of
unequal replication factor, more than :data:`MAX_PARTITIONS` partitions, or a leader
outside the ISR each raise ``ValueError`` with a message naming the problem, and no
input raises anything else. A new field needs a new ``"version"``.

The value types check the same invariants when constructed, so a value that exists
is valid. They are immutable and safe to share between threads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from rill.client.topic_names import validate_topic
from rill.client.zookeeper.registry import RILL_TOPICS_PATH, is_replicated_topic_value

__all__ = [
    "CONTROLLER_EPOCH_PATH", "CONTROLLER_PATH", "DELETE_TOPICS_PATH", "LEADER_DURING_DELETE", "MAX_PARTITIONS",
    "NO_LEADER", "RILL_TOPICS_PATH", "THROTTLE_PATH",
    "ControllerInfo", "PartitionState", "TopicReplicas", "decode_controller_epoch", "decode_throttle",
    "encode_controller_epoch", "encode_throttle",
    "delete_marker_path", "is_replicated_topic_value", "partition_path", "partitions_path", "state_path",
    "topic_path",
]

CONTROLLER_PATH = "/rill/controller"
CONTROLLER_EPOCH_PATH = "/rill/controller_epoch"
THROTTLE_PATH = "/rill/admin/replication_throttle"
DELETE_TOPICS_PATH = "/rill/admin/delete_topics"
THROTTLE_VERSION = 1
MAX_PARTITIONS = 10_000
NO_LEADER = -1
LEADER_DURING_DELETE = -2  # a LeaderAndIsr entry's leader while its topic is deleted (Kafka's LeaderDuringDelete)
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
TOPIC_VERSION = 2
REASSIGNING_TOPIC_VERSION = 3
STATE_VERSION = 1
CONTROLLER_VERSION = 1


# -- paths -------------------------------------------------------------------------------

def topic_path(topic: str) -> str:
    """``/rill/topics/[topic]``. Raises InvalidTopic for an illegal name (it could name another node)."""
    return f"{RILL_TOPICS_PATH}/{validate_topic(topic)}"


def partitions_path(topic: str) -> str:
    """``/rill/topics/[topic]/partitions``. Raises InvalidTopic as :func:`topic_path`."""
    return f"{topic_path(topic)}/partitions"


def partition_path(topic: str, partition: int) -> str:
    """``/rill/topics/[topic]/partitions/[p]``.

    Raises:
        InvalidTopic: an illegal name. ValueError: ``partition`` outside 0..MAX_PARTITIONS-1.
    """
    if type(partition) is not int or not 0 <= partition < MAX_PARTITIONS:
        raise ValueError(f"partition {partition!r} is outside 0..{MAX_PARTITIONS - 1}")
    return f"{partitions_path(topic)}/{partition}"


def delete_marker_path(topic: str) -> str:
    """``/rill/admin/delete_topics/[topic]``. Raises InvalidTopic as :func:`topic_path`."""
    return f"{DELETE_TOPICS_PATH}/{validate_topic(topic)}"


def state_path(topic: str, partition: int) -> str:
    """``/rill/topics/[topic]/partitions/[p]/state``. Raises as :func:`partition_path`."""
    return f"{partition_path(topic, partition)}/state"


# -- value types ---------------------------------------------------------------------------

@dataclass(frozen=True)
class TopicReplicas:
    """A replicated topic's assignment and config: the value of ``/rill/topics/[topic]``.

    ``replicas[p]`` lists partition ``p``'s replica broker ids in assignment order; the
    first is the preferred leader. ``adding[p]`` and ``removing[p]`` exist only for a
    partition being reassigned: the replicas joining and leaving, both among
    ``replicas[p]``, disjoint, non-empty and of one size; its target
    (:meth:`target`) is ``replicas[p]`` without those leaving. Invariants (checked on
    construction, ``ValueError``): 1..MAX_PARTITIONS partitions, every list non-empty,
    of distinct ids in 0..2**31-1, every target of one length (the replication factor).
    ``config`` maps setting names to string values (Kafka's topic config, e.g.
    ``"min.insync.replicas": "2"``). The mappings are stored read-only and left out of the hash.
    """

    replicas: tuple[tuple[int, ...], ...]
    config: Mapping[str, str] = field(default_factory=dict, hash=False)
    adding: Mapping[int, tuple[int, ...]] = field(default_factory=dict, hash=False)
    removing: Mapping[int, tuple[int, ...]] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        lists = _replica_lists(self.replicas)
        adding, removing = _moves(lists, self.adding, self.removing)
        object.__setattr__(self, "replicas", lists)
        object.__setattr__(self, "config", MappingProxyType(_config(self.config)))
        object.__setattr__(self, "adding", MappingProxyType(adding))
        object.__setattr__(self, "removing", MappingProxyType(removing))
        _same_factor([self.target(p) for p in range(len(lists))])

    @property
    def partitions(self) -> int:
        """The number of partitions (at least 1)."""
        return len(self.replicas)

    @property
    def replication_factor(self) -> int:
        """Replicas per partition once reassignments end (at least 1, the same for every partition)."""
        return len(self.target(0))

    def target(self, partition: int) -> tuple[int, ...]:
        """The partition's replicas once its reassignment ends (its replicas when none is under way)."""
        leaving = self.removing.get(partition, ())
        return tuple(b for b in self.replicas[partition] if b not in leaving)

    def reassigning(self) -> list[int]:
        """The partitions being reassigned, in order."""
        return sorted(self.adding)

    def encode(self) -> bytes:
        """``{"version":2,"replicas":[[..],..]}`` plus ``"config"`` when it is not empty (compact JSON);
        version 3 with ``adding_replicas`` and ``removing_replicas`` while a partition is reassigned."""
        value: dict[str, Any] = {"version": REASSIGNING_TOPIC_VERSION if self.adding else TOPIC_VERSION,
                                 "replicas": [list(r) for r in self.replicas]}
        if self.adding:
            value["adding_replicas"] = {str(p): list(b) for p, b in sorted(self.adding.items())}
            value["removing_replicas"] = {str(p): list(b) for p, b in sorted(self.removing.items())}
        if self.config:
            value["config"] = dict(self.config)
        return _dump(value)

    @classmethod
    def decode(cls, data: bytes) -> TopicReplicas:
        """The topic node's bytes -> value. Raises ValueError (only) for anything malformed."""
        value = _load_object(data, "replicated topic")
        if value.get("version") == REASSIGNING_TOPIC_VERSION:
            _fields(value, "replicated topic", required=("version", "replicas", "adding_replicas",
                                                         "removing_replicas"), optional=("config",))
            return cls(value["replicas"], value.get("config", {}), _partition_map(value["adding_replicas"], "adding"),
                       _partition_map(value["removing_replicas"], "removing"))
        _fields(value, "replicated topic", required=("version", "replicas"), optional=("config",))
        _version(value, TOPIC_VERSION, "replicated topic")
        return cls(value["replicas"], value.get("config", {}))


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition's leader and ISR: the value of ``.../partitions/[p]/state`` (Kafka's LeaderAndIsr).

    ``leader`` is a broker id, or -1 (:data:`NO_LEADER`) when the partition has none;
    ``leader_epoch`` goes up by one with each leader election; ``controller_epoch`` is
    the epoch of the controller that made the decision. Invariants (``ValueError``):
    ids and epochs in 0..2**31-1, ISR ids distinct, and a leader other than -1 in the
    ISR. A leaderless partition may keep a non-empty ISR (Kafka leaves the last member
    there when it dies, so it can return as a clean leader); Kafka never writes an
    empty ISR, which is accepted only with leader -1.
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int

    def __post_init__(self) -> None:
        _int(self.leader, "leader", low=NO_LEADER)
        _int(self.leader_epoch, "leader_epoch")
        _int(self.controller_epoch, "controller_epoch")
        isr = _ids(self.isr, "isr")
        object.__setattr__(self, "isr", isr)
        if self.leader != NO_LEADER and self.leader not in isr:
            raise ValueError(f"leader {self.leader} is not in the ISR {list(isr)}")

    def encode(self) -> bytes:
        """Kafka's bytes, key for key and in its order (compact JSON).

        ``{"controller_epoch":7,"leader":1,"version":1,"leader_epoch":3,"isr":[1,3,2]}``
        """
        return _dump({"controller_epoch": self.controller_epoch, "leader": self.leader, "version": STATE_VERSION,
                      "leader_epoch": self.leader_epoch, "isr": list(self.isr)})

    @classmethod
    def decode(cls, data: bytes) -> PartitionState:
        """A state node's bytes -> value (keys in any order). Raises ValueError (only) when malformed."""
        value = _load_object(data, "partition state")
        _fields(value, "partition state", required=("controller_epoch", "leader", "version", "leader_epoch", "isr"))
        _version(value, STATE_VERSION, "partition state")
        return cls(value["leader"], value["leader_epoch"], value["isr"], value["controller_epoch"])


@dataclass(frozen=True, slots=True)
class ControllerInfo:
    """The value of the ephemeral ``/rill/controller``: who the controller is, and since when.

    ``broker_id`` in 0..2**31-1; ``timestamp_ms`` (wall clock, ms since the epoch) in
    0..2**63-1, written as a decimal string as Kafka does. ``ValueError`` otherwise.
    """

    broker_id: int
    timestamp_ms: int

    def __post_init__(self) -> None:
        _int(self.broker_id, "brokerid")
        _int(self.timestamp_ms, "timestamp", high=INT64_MAX)

    def encode(self) -> bytes:
        """``{"version":1,"brokerid":1,"timestamp":"1700000000000"}``."""
        return _dump({"version": CONTROLLER_VERSION, "brokerid": self.broker_id, "timestamp": str(self.timestamp_ms)})

    @classmethod
    def decode(cls, data: bytes) -> ControllerInfo:
        """``/rill/controller``'s bytes -> value. Raises ValueError (only) when malformed."""
        value = _load_object(data, "controller")
        _fields(value, "controller", required=("version", "brokerid", "timestamp"))
        _version(value, CONTROLLER_VERSION, "controller")
        timestamp = value["timestamp"]
        if not isinstance(timestamp, str) or not _is_decimal(timestamp, 19):
            raise ValueError(f"controller timestamp must be a string of 1-19 digits, not {timestamp!r:.40}")
        return cls(value["brokerid"], int(timestamp))


def encode_throttle(bytes_per_second: int) -> bytes:
    """The replication throttle as ``/rill/admin/replication_throttle`` holds it. ValueError if negative or over 2**63-1."""
    return _dump({"version": THROTTLE_VERSION, "bytes_per_second": _int(bytes_per_second, "bytes_per_second",
                                                                           high=INT64_MAX)})


def decode_throttle(data: bytes) -> int:
    """``/rill/admin/replication_throttle``'s bytes -> bytes per second (0: none). Raises ValueError (only)."""
    value = _load_object(data, "replication throttle")
    _fields(value, "replication throttle", required=("version", "bytes_per_second"))
    _version(value, THROTTLE_VERSION, "replication throttle")
    return _int(value["bytes_per_second"], "bytes_per_second", high=INT64_MAX)


def encode_controller_epoch(epoch: int) -> bytes:
    """The epoch as ``/rill/controller_epoch`` holds it: decimal ASCII (``b"7"``). ValueError if outside 0..2**31-1."""
    return str(_int(epoch, "controller epoch")).encode()


def decode_controller_epoch(data: bytes) -> int:
    """``b"7"`` -> 7. Raises ValueError (only) unless ``data`` is 1-10 ASCII digits worth at most 2**31-1."""
    text = bytes(data).decode("ascii", errors="replace") if isinstance(data, (bytes, bytearray)) else ""
    if not _is_decimal(text, 10) or int(text) > INT32_MAX:
        raise ValueError(f"controller epoch must be a decimal number in 0..{INT32_MAX}, not {data!r:.60}")
    return int(text)


# -- checks shared by the constructors and the decoders ----------------------------------------

def _dump(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise ValueError(f"a key appears twice in one object: {[k for k, _ in pairs]!r:.80}")
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")


def _load_object(data: bytes, what: str) -> dict[str, Any]:
    """JSON object from ``data``; ValueError for anything else (bad bytes, deep nesting, duplicate keys)."""
    if not isinstance(data, (bytes, bytearray)):
        raise ValueError(f"{what}: expected bytes, not {type(data).__name__}")
    try:
        value = json.loads(data, object_pairs_hook=_reject_duplicate_keys, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{what}: not valid JSON ({str(exc)[:80]}): {bytes(data[:80])!r}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{what}: expected a JSON object, not {bytes(data[:80])!r}")
    return value


def _fields(value: Mapping[str, Any], what: str, *, required: Sequence[str], optional: Sequence[str] = ()) -> None:
    missing = [k for k in required if k not in value]
    unknown = sorted(k for k in value if k not in required and k not in optional)
    if missing or unknown:
        raise ValueError(f"{what}: missing fields {missing}, unknown fields {unknown!r:.120}")


def _version(value: Mapping[str, Any], expected: int, what: str) -> None:
    if type(value["version"]) is not int or value["version"] != expected:
        raise ValueError(f"{what}: version {value['version']!r:.40} is not {expected}")


def _int(value: Any, what: str, *, low: int = 0, high: int = INT32_MAX) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{what} must be an integer in {low}..{high}, not {value!r:.40}")
    return value


def _is_decimal(text: str, max_digits: int) -> bool:
    return 0 < len(text) <= max_digits and text.isascii() and text.isdigit()


def _ids(value: Any, what: str) -> tuple[int, ...]:
    """A list of distinct broker ids in 0..2**31-1, as a tuple; ValueError otherwise."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{what} must be a list of broker ids, not {value!r:.40}")
    ids = tuple(_int(i, f"{what} broker id") for i in value)
    if len(set(ids)) != len(ids):
        raise ValueError(f"{what} lists a broker twice: {list(ids)!r:.80}")
    return ids


def _replica_lists(value: Any) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"replicas must be a list of replica lists, not {value!r:.40}")
    if not 1 <= len(value) <= MAX_PARTITIONS:
        raise ValueError(f"replicas lists {len(value)} partitions, outside 1..{MAX_PARTITIONS}")
    lists = tuple(_ids(r, f"partition {p} replicas") for p, r in enumerate(value))
    for p, replicas in enumerate(lists):
        if not replicas:
            raise ValueError(f"partition {p} has no replicas")
    return lists


def _same_factor(targets: Sequence[tuple[int, ...]]) -> None:
    factor = len(targets[0])
    for p, replicas in enumerate(targets):
        if len(replicas) != factor:
            raise ValueError(f"partition {p} has {len(replicas)} replicas, partition 0 has {factor}: "
                             "every partition of a topic has the same replication factor")


def _partition_map(value: Any, what: str) -> dict[int, Any]:
    """``{"0": [..]}`` -> ``{0: [..]}``; ValueError for a key that is not a partition number."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{what}_replicas must be an object of partition numbers, not {value!r:.40}")
    out: dict[int, Any] = {}
    for key, item in value.items():
        if not _is_decimal(key, 5) or int(key) >= MAX_PARTITIONS or str(int(key)) != key:
            raise ValueError(f"{what}_replicas: {key!r:.20} is not a partition number")
        out[int(key)] = item
    return out


def _moves(lists: tuple[tuple[int, ...], ...], adding: Any, removing: Any
           ) -> tuple[dict[int, tuple[int, ...]], dict[int, tuple[int, ...]]]:
    """Check a reassignment's adding and removing replicas against the replica lists (see TopicReplicas)."""
    if not isinstance(adding, Mapping) or not isinstance(removing, Mapping):
        raise ValueError("adding and removing replicas must map partitions to broker ids")
    if set(adding) != set(removing):
        raise ValueError(f"partitions {sorted(set(adding) ^ set(removing))!r:.60} have adding replicas without "
                         "removing ones or the reverse")
    added: dict[int, tuple[int, ...]] = {}
    removed: dict[int, tuple[int, ...]] = {}
    for p in sorted(adding):
        if type(p) is not int or not 0 <= p < len(lists):
            raise ValueError(f"a reassigned partition {p!r:.20} is not one of the {len(lists)} partitions")
        joining, leaving = _ids(adding[p], f"partition {p} adding"), _ids(removing[p], f"partition {p} removing")
        if not joining or len(joining) != len(leaving) or set(joining) & set(leaving):
            raise ValueError(f"partition {p}: adding {list(joining)} and removing {list(leaving)} must be disjoint, "
                             "non-empty and of one size")
        if not set(joining) | set(leaving) <= set(lists[p]):
            raise ValueError(f"partition {p}: adding {list(joining)} and removing {list(leaving)} must be among its "
                             f"replicas {list(lists[p])}")
        added[p], removed[p] = joining, leaving
    return added, removed


def _config(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ValueError(f"config must be an object of strings, not {value!r:.40}")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise ValueError(f"config entry {key!r:.40}: {item!r:.40} is not a string to a string")
    return dict(value)
