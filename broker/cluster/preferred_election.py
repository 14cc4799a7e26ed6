"""Preferred leader election: on demand (Admin ElectLeaders) and automatic (the leader rebalance).

A partition's **preferred replica** is the first of its assignment; the creation spreads
them so that each broker leads its share (replica_assignment.py). Leadership drifts away
when brokers stop: a returning broker follows everything. A preferred election gives
leadership back (Kafka's ``PreferredReplicaPartitionLeaderElectionStrategy``,
replication notes 3.3): the preferred replica leads, with the same ISR and the leader
epoch one higher, written behind the controller's epoch check like every controller
decision; the old leader becomes a follower when its LeaderAndIsr arrives.

- **On demand** (:func:`run_preferred_election`, KIP-460's ElectLeaders with type
  PREFERRED): every partition asked gets an :class:`ElectionResult`. It is elected when
  the preferred replica is live, not shutting down and in the ISR (:func:`why_not_elect`);
  otherwise the answer says why: it leads already, or it is not available.
- **Automatic** (:func:`rebalance_targets`, ``auto.leader.rebalance.enable``): every
  ``leader.imbalance.check.interval.seconds`` the controller computes, per broker, the
  partitions it should lead (it is their preferred replica) and how many of those it does
  not lead (:func:`leader_imbalance`). Above ``leader.imbalance.per.broker.percentage``
  those whose election can run are elected (:func:`rebalance_candidates`): Kafka's
  ``checkAndTriggerAutoLeaderRebalance``.

Leaders change their ISR in ZooKeeper without telling the controller (notes 3.4), so a
returning broker rejoins ISRs the controller's context does not know of. Both paths read
the states of the partitions concerned again before deciding.

:func:`why_not_elect`, :func:`leader_imbalance` and :func:`rebalance_candidates` are pure;
:func:`run_preferred_election` and :func:`rebalance_targets` run on the controller's worker
thread (they read ZooKeeper and update the context they are given).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

import structlog
from kazoo.client import KazooClient

from rill.broker.cluster.controller_actions import elect_and_write, reread
from rill.broker.cluster.controller_context import ControllerContext
from rill.broker.cluster.partition_states import PartitionKey
from rill.broker.replication.leader_election import elect_preferred
from rill.client.zookeeper.replica_layout import NO_LEADER, PartitionState

__all__ = ["ElectionResult", "Imbalance", "Outcome", "RebalancePolicy", "Requested", "leader_imbalance",
           "rebalance_candidates", "rebalance_targets", "run_preferred_election", "why_not_elect"]

log = structlog.get_logger(__name__)

Requested = Sequence[tuple[str, "int | None"]] | None
"""Partitions asked for: (topic, partition), (topic, None) for every partition of the topic; None: all."""

Assigned = Mapping[PartitionKey, tuple[tuple[int, ...], PartitionState]]
"""Partition -> (its replicas in assignment order, its state)."""


class Outcome(enum.Enum):
    """What a preferred election did to one partition (each maps to a wire ErrorCode in the Admin service)."""

    ELECTED = "elected"                          # the preferred replica leads now, in a new leader epoch
    ALREADY_PREFERRED = "already preferred"      # Kafka's ELECTION_NOT_NEEDED
    NOT_AVAILABLE = "preferred not available"    # not live, shutting down, or not in the ISR
    UNKNOWN_PARTITION = "unknown partition"      # no such replicated topic or partition
    FAILED = "failed"                            # its state kept changing under the writes: retry


@dataclass(frozen=True, slots=True)
class ElectionResult:
    """One partition's answer. ``partition`` is -1 for a named topic the controller does not hold;
    ``leader`` is the leader afterwards (-1: none, or unknown); ``detail`` says why, for the failures."""

    topic: str
    partition: int
    outcome: Outcome
    leader: int
    detail: str = ""


@dataclass(frozen=True, slots=True)
class RebalancePolicy:
    """The automatic rebalance's settings (Kafka's keys and defaults)."""

    enabled: bool = True                 # auto.leader.rebalance.enable
    interval_s: float = 300.0            # leader.imbalance.check.interval.seconds
    percentage: float = 10.0             # leader.imbalance.per.broker.percentage


@dataclass(frozen=True, slots=True)
class Imbalance:
    """One broker's share of leadership: ``should_lead`` partitions have it as preferred replica;
    ``not_led`` are those of them led by another broker (or by none), in key order."""

    broker: int
    should_lead: int
    not_led: tuple[PartitionKey, ...]

    @property
    def ratio(self) -> float:
        """``len(not_led) / should_lead`` (0 .. 1)."""
        return len(self.not_led) / self.should_lead


def why_not_elect(state: PartitionState, replicas: Sequence[int], live: Collection[int],
                  shutting_down: Collection[int]) -> tuple[Outcome, str] | None:
    """Why the preferred replica cannot (or need not) be made leader: (outcome, detail); None when it can."""
    preferred = replicas[0]
    if state.leader == preferred:
        return Outcome.ALREADY_PREFERRED, ""
    if preferred not in live:
        return Outcome.NOT_AVAILABLE, f"preferred replica {preferred} is not live"
    if preferred in shutting_down:
        return Outcome.NOT_AVAILABLE, f"preferred replica {preferred} is shutting down"
    if preferred not in state.isr:
        return Outcome.NOT_AVAILABLE, (f"preferred replica {preferred} is not in the ISR "
                                       f"[{','.join(map(str, state.isr))}]")
    return None


def leader_imbalance(partitions: Assigned) -> dict[int, Imbalance]:
    """Per preferred broker, the partitions it should lead and those it does not lead; by broker id."""
    should: dict[int, int] = {}
    not_led: dict[int, list[PartitionKey]] = {}
    for key, (replicas, state) in partitions.items():
        preferred = replicas[0]
        should[preferred] = should.get(preferred, 0) + 1
        if state.leader != preferred:
            not_led.setdefault(preferred, []).append(key)
    return {b: Imbalance(b, should[b], tuple(sorted(not_led.get(b, ())))) for b in sorted(should)}


def rebalance_candidates(partitions: Assigned, live: Collection[int], shutting_down: Collection[int],
                         percentage: float) -> tuple[list[PartitionKey], list[Imbalance]]:
    """The partitions an automatic rebalance elects: of each broker whose ratio is above ``percentage`` %,
    the partitions it does not lead whose election can run (:func:`why_not_elect`).

    Returns:
        (the partitions, in key order; the brokers above the threshold, by id). ([], []) when balanced.
    """
    over = [i for i in leader_imbalance(partitions).values() if i.ratio > percentage / 100]
    keys = [key for i in over for key in i.not_led
            if why_not_elect(partitions[key][1], partitions[key][0], live, shutting_down) is None]
    return sorted(keys), over


def _resolve(ctx: ControllerContext, requested: Requested) -> tuple[list[PartitionKey], list[ElectionResult]]:
    """The partitions of ``requested`` the controller holds (key order, no duplicates), and an
    UNKNOWN_PARTITION result for each other one asked."""
    if requested is None:
        return sorted(ctx.states), []
    keys: set[PartitionKey] = set()
    unknown: dict[PartitionKey, ElectionResult] = {}
    for topic, partition in requested:
        replicas = ctx.topics.get(topic)
        if replicas is None:
            kind = "a Kafka 0.7-style topic (one replica)" if topic in ctx.skipped else "not a replicated topic"
            unknown[(topic, -1)] = ElectionResult(topic, -1, Outcome.UNKNOWN_PARTITION, NO_LEADER, f"{topic} is {kind}")
            continue
        for p in range(replicas.partitions) if partition is None else (partition,):
            if (topic, p) in ctx.states:
                keys.add((topic, p))
            else:
                detail = (f"{topic} has partitions 0..{replicas.partitions - 1}" if not 0 <= p < replicas.partitions
                          else f"{topic}-{p} has no state yet")
                unknown[(topic, p)] = ElectionResult(topic, p, Outcome.UNKNOWN_PARTITION, NO_LEADER, detail)
    return sorted(keys), [unknown[k] for k in sorted(unknown)]


def run_preferred_election(zk: KazooClient, ctx: ControllerContext, requested: Requested,
                           max_attempts: int) -> tuple[list[ElectionResult], list[PartitionKey], int]:
    """Elect the preferred replica of each partition asked that can take leadership.

    The partitions' states are read again first; the writes are
    :func:`~rill.broker.cluster.controller_actions.elect_and_write`'s (fenced, retried).
    The caller sends the LeaderAndIsr of the partitions written.

    Returns:
        (one result per partition asked, in (topic, partition) order; the partitions
        written; the number of lost writes retried).

    Raises:
        ControllerMoved, KazooException: as elect_and_write.
    """
    keys, unknown = _resolve(ctx, requested)
    reread(zk, ctx, keys)
    keys = [key for key in keys if key in ctx.states]
    live, stopping, epoch = frozenset(ctx.live), frozenset(ctx.shutting_down), ctx.epoch.epoch

    def decide(key: PartitionKey, state: PartitionState) -> PartitionState | None:
        replicas = ctx.replicas(key)
        if why_not_elect(state, replicas, live, stopping) is not None:
            return None
        return elect_preferred(state, replicas, live - stopping, controller_epoch=epoch)

    eligible = [key for key in keys if why_not_elect(ctx.states[key][0], ctx.replicas(key), live, stopping) is None]
    changed, lost = elect_and_write(zk, ctx, eligible, decide, max_attempts)
    written = set(changed)
    results = [*unknown, *(_result(ctx, key, key in written, live, stopping) for key in keys)]
    return sorted(results, key=lambda r: (r.topic, r.partition)), changed, lost


def _result(ctx: ControllerContext, key: PartitionKey, written: bool, live: Collection[int],
            stopping: Collection[int]) -> ElectionResult:
    state = ctx.states[key][0]
    if written:
        return ElectionResult(key[0], key[1], Outcome.ELECTED, state.leader)
    reason = why_not_elect(state, ctx.replicas(key), live, stopping)
    if reason is None:  # eligible, but every write of it was lost to a concurrent ISR change
        return ElectionResult(key[0], key[1], Outcome.FAILED, state.leader,
                              "its state kept changing while the controller wrote it: retry")
    return ElectionResult(key[0], key[1], reason[0], state.leader, reason[1])


def rebalance_targets(zk: KazooClient, ctx: ControllerContext, percentage: float) -> list[PartitionKey]:
    """The partitions the automatic rebalance elects now (:func:`rebalance_candidates` over fresh states).

    Partitions not led by their preferred replica, whose preferred replica is live and
    not shutting down, are read again first (their ISR may have grown). Brokers above the
    threshold are logged (``controller.leader_imbalance``: info when some of their partitions
    are elected, debug when none can be).
    """
    candidates = ctx.candidates()
    stale = [key for key, (state, _) in ctx.states.items()
             if state.leader != ctx.replicas(key)[0] and ctx.replicas(key)[0] in candidates]
    if not stale:
        return []
    reread(zk, ctx, stale)
    keys, over = rebalance_candidates(_assigned(ctx, ctx.states), ctx.live, ctx.shutting_down, percentage)
    for i in over:
        electing = sum(1 for key in keys if ctx.replicas(key)[0] == i.broker)
        (log.info if electing else log.debug)(
            "controller.leader_imbalance", broker=i.broker, ratio=round(i.ratio, 3), should_lead=i.should_lead,
            not_led=len(i.not_led), threshold_percent=percentage, electing=electing)
    return keys


def _assigned(ctx: ControllerContext, keys: Iterable[PartitionKey]) -> dict[PartitionKey, tuple[tuple[int, ...],
                                                                                             PartitionState]]:
    return {key: (ctx.replicas(key), ctx.states[key][0]) for key in keys}
