"""The controller's in-memory view of replicated partitions, and its decisions over it.

A :class:`ControllerContext` exists only while its broker is the controller. It holds
every replicated topic's assignment and every partition's state with the zkVersion it
was read or written at, so an election decides in memory and writes only what
changes (never a re-read of everything). It is created from ZooKeeper when the broker
wins the election and dropped when it resigns.

The decisions (:func:`decide_reconcile`, :func:`decide_shutdown`) wrap
``rill.broker.replication.leader_election``'s rules: each returns the state to write
for one partition, or None when nothing changes, with the leader epoch one higher
than the current one whatever the decision combines.

Thread-safety: none; only the controller's worker thread touches a context.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from rill.broker.cluster.partition_states import ControllerEpoch, PartitionKey
from rill.broker.replication.leader_election import elect_for_shutdown, elect_offline, remove_from_isr
from rill.broker.replication.replica import PartitionRole
from rill.client.protocol import requests as rq
from rill.client.zookeeper.registry import BrokerRegistration
from rill.broker.log.topic_log_settings import log_settings_of
from rill.client.zookeeper.replica_layout import NO_LEADER, PartitionState, TopicReplicas

__all__ = ["UNCLEAN_KEY", "ControllerContext", "TopicDeletion", "decide_reconcile", "decide_shutdown", "unclean_for"]

UNCLEAN_KEY = "unclean.leader.election.enable"


def min_insync_for(replicas: TopicReplicas) -> int:
    """The topic's ``min.insync.replicas`` (0, the brokers' own setting, when it has none or a bad one)."""
    value = replicas.config.get("min.insync.replicas", "")
    return int(value) if value.isdigit() and 0 < int(value) <= 1000 else 0


def unclean_for(replicas: TopicReplicas, default: bool) -> bool:
    """The topic's ``unclean.leader.election.enable`` ("true"/"false", any case), else ``default``."""
    value = replicas.config.get(UNCLEAN_KEY)
    if value is None:
        return default
    return value.strip().lower() == "true"


def decide_reconcile(current: PartitionState, replicas: tuple[int, ...], live: Collection[int], *,
                     unclean: bool, controller_epoch: int) -> PartitionState | None:
    """The state a partition needs given the live brokers (candidates: live and not shutting down).

    A leader that is not live (or none) -> :func:`elect_offline` (which also keeps only
    live ISR members); a live leader with ISR members that are not live -> they leave
    the ISR (:func:`remove_from_isr` for each, one leader-epoch bump in all). None when
    nothing changes.
    """
    if current.leader == NO_LEADER or current.leader not in live:
        return elect_offline(current, replicas, live, unclean=unclean, controller_epoch=controller_epoch)
    changed = current
    for broker in current.isr:
        if broker not in live:
            changed = remove_from_isr(changed, broker, controller_epoch=controller_epoch) or changed
    if changed is current:
        return None
    return dataclasses.replace(changed, leader_epoch=current.leader_epoch + 1)


def decide_shutdown(current: PartitionState, replicas: tuple[int, ...], live: Collection[int],
                    shutting_down: Collection[int], *, controller_epoch: int) -> PartitionState | None:
    """:func:`elect_for_shutdown`: leadership and ISR membership off the stopping brokers; None if impossible or done."""
    return elect_for_shutdown(current, replicas, live, shutting_down, controller_epoch=controller_epoch)


@dataclass
class TopicDeletion:
    """A topic being deleted (topic_deletion.py): its assignment and each partition's leader epoch when the
    deletion began, the brokers that have not yet confirmed they stopped and deleted its replicas, and those
    that have (recorded in the marker, for a next controller)."""

    replicas: TopicReplicas
    leader_epochs: dict[int, int]
    waiting: set[int]
    confirmed: set[int] = field(default_factory=set)
    reported: frozenset[int] = frozenset()  # the waiting brokers last logged


@dataclass
class ControllerContext:
    """What the controller knows, valid for ``epoch`` only.

    Invariants: every key of ``states`` is ``(topic, p)`` with ``topic`` in ``topics`` and
    ``p`` below its partition count; ``states[key]`` is ``(state, zkVersion)`` as last
    read or written by this controller. ``live`` maps the broker ids the controller has
    acted on (registered with a gRPC port) to their registrations; ``shutting_down``
    holds the ids in a controlled shutdown, until they leave ``live``. ``skipped``: topic
    nodes under ``/rill/topics`` that are not replicated topics (0.7 maps), not read again.
    ``throttle``: the replication throttle every LeaderAndIsr carries (reassignment_steps.py).
    ``deleting``: topics being deleted, no longer in ``topics`` nor ``states`` (topic_deletion.py).
    """

    epoch: ControllerEpoch
    topics: dict[str, TopicReplicas] = field(default_factory=dict)
    states: dict[PartitionKey, tuple[PartitionState, int]] = field(default_factory=dict)
    live: dict[int, BrokerRegistration] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)
    skipped: set[str] = field(default_factory=set)
    throttle: int = 0  # the replication throttle in bytes/s (0: none), from /rill/admin/replication_throttle
    deleting: dict[str, TopicDeletion] = field(default_factory=dict)

    def add_topic(self, topic: str, replicas: TopicReplicas, states: Mapping[int, tuple[PartitionState, int]]) -> None:
        """Hold ``topic``; partitions without a state node are left out (and logged by the caller)."""
        self.topics[topic] = replicas
        for p, value in states.items():
            self.states[(topic, p)] = value

    def drop_topic(self, topic: str) -> None:
        """Forget a topic whose node is gone."""
        replicas = self.topics.pop(topic, None)
        if replicas is not None:
            for p in range(replicas.partitions):
                self.states.pop((topic, p), None)

    def replicas(self, key: PartitionKey) -> tuple[int, ...]:
        """The partition's replicas in assignment order. Raises KeyError for an unknown topic."""
        return self.topics[key[0]].replicas[key[1]]

    def brokers(self) -> list[rq.BrokerInfo]:
        """The live brokers as LeaderAndIsr lists them, by id."""
        return [rq.BrokerInfo(b, r.host, r.port, r.grpc_port) for b, r in sorted(self.live.items())]

    def candidates(self) -> frozenset[int]:
        """Brokers that may lead or stay in an ISR: live and not shutting down."""
        return frozenset(self.live) - self.shutting_down

    def touching(self, brokers: Collection[int]) -> list[PartitionKey]:
        """Partitions led by one of ``brokers`` or listing one in the ISR, in key order."""
        return sorted(key for key, (state, _) in self.states.items()
                      if state.leader in brokers or any(b in brokers for b in state.isr))

    def hosted_on(self, brokers: Collection[int]) -> list[PartitionKey]:
        """Partitions with one of ``brokers`` among their replicas, in key order."""
        return sorted(key for key in self.states if any(b in brokers for b in self.replicas(key)))

    def offline_with(self, broker: int) -> list[PartitionKey]:
        """Leaderless partitions that have ``broker`` among their replicas, in key order."""
        return sorted(key for key, (state, _) in self.states.items()
                      if state.leader == NO_LEADER and broker in self.replicas(key))

    def led_by(self, broker: int, min_factor: int = 1) -> list[PartitionKey]:
        """Partitions ``broker`` leads, of topics with at least ``min_factor`` replicas, in key order."""
        return sorted(key for key, (state, _) in self.states.items()
                      if state.leader == broker and self.topics[key[0]].replication_factor >= min_factor)

    def role(self, key: PartitionKey) -> PartitionRole:
        """The partition's LeaderAndIsr entry from what the context holds."""
        state, version = self.states[key]
        topic = self.topics[key[0]]
        return PartitionRole(key[0], key[1], state.leader, state.leader_epoch, state.isr, self.replicas(key),
                             version, min_insync_for(topic), topic.adding.get(key[1], ()),
                             topic.removing.get(key[1], ()), log_settings_of(topic.config))

    def roles(self, keys: Iterable[PartitionKey] | None = None) -> Iterator[PartitionRole]:
        """The roles of ``keys`` (default: every partition, in key order); unknown keys are skipped."""
        for key in sorted(self.states) if keys is None else keys:
            if key in self.states:
                yield self.role(key)
