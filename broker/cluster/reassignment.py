"""Partition reassignment: the rules, as pure functions (Kafka's ``onPartitionReassignment``, KIP-455).

Moving a partition from its original replicas (ORS) to target replicas (TRS), say
{1,2,3} to {2,3,4}, happens in two steps, each a controller decision written to
ZooKeeper behind its epoch check (reassignment_steps.py writes them, the controller
sends them), with no moment at which the partition has no in-sync leader:

1. **Start** (:func:`begin`, :func:`decide_start`). The topic node lists the union,
   target first (``[2,3,4,1]``), with ``adding_replicas`` {4} and
   ``removing_replicas`` {1}, as Kafka 2.4+ stores it; the leader epoch goes up by one
   (same leader, same ISR) so the leader learns its new replica set, and every broker
   gets the role: broker 4 creates its replica and fetches from the leader (throttled,
   when a throttle is set, until it is caught up), the leader tracks it and adds it to
   the ISR by the usual rule once it has caught up.
2. **Completion** (:func:`ready_to_complete`, :func:`decide_completion`, :func:`finish`),
   once every target replica is in the ISR: if the leader is leaving (or not live), the
   first target replica that is live and in the ISR leads; the ISR loses the replicas
   leaving; the leader epoch goes up by one. Then the topic node lists the target alone
   and the reassignment fields go. Brokers given a role whose replicas no longer list
   them stop their replica and delete its log (replica_manager.py).

A controller that fails over reads the node, sees ``adding_replicas``, and runs step 1
again (the epoch bump is what tells the leader the replica set) before waiting for step
2: the topic node is the only durable record of the old set, so it is written last.

The checks of a request (:func:`target_problem`) are Kafka's, with one rule of rill's: a
topic has one replication factor, so the target must have the topic's.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from rill.client.zookeeper.replica_layout import NO_LEADER, PartitionState, TopicReplicas

__all__ = ["Outcome", "ReassignmentResult", "begin", "decide_completion", "decide_start", "finish",
           "ready_to_complete", "target_problem"]


class Outcome(enum.Enum):
    """What a request did to one partition (each maps to a wire ErrorCode in the Admin service)."""

    STARTED = "started"                      # written; the new replicas are catching up
    NOTHING_TO_DO = "nothing to do"          # the target is the current replica set (in that order)
    UNKNOWN_PARTITION = "unknown partition"  # no such replicated topic or partition
    INVALID_FACTOR = "invalid factor"        # the target has not the topic's replication factor
    INVALID = "invalid"                      # a broker listed twice or not live; moving elsewhere already
    FAILED = "failed"                        # ZooKeeper failed or kept changing: retry


@dataclass(frozen=True, slots=True)
class ReassignmentResult:
    """One partition's answer; ``detail`` says why for the failures."""

    topic: str
    partition: int
    outcome: Outcome
    detail: str = ""


def target_problem(topic: TopicReplicas | None, partition: int, target: Sequence[int],
                   live: Collection[int]) -> tuple[Outcome, str] | None:
    """Why ``target`` cannot be the replicas of ``partition`` (None: it can; NOTHING_TO_DO when it is already).

    ``topic``: the topic as the controller holds it (None: not a replicated topic).
    A partition already being moved to the same target is NOTHING_TO_DO; to another, INVALID.
    """
    if topic is None:
        return Outcome.UNKNOWN_PARTITION, "not a replicated topic"
    if not 0 <= partition < topic.partitions:
        return Outcome.UNKNOWN_PARTITION, f"the topic has partitions 0..{topic.partitions - 1}"
    if len(set(target)) != len(target) or any(b < 0 for b in target):
        return Outcome.INVALID, f"replicas {list(target)} must be distinct broker ids"
    if len(target) != topic.replication_factor:
        return Outcome.INVALID_FACTOR, (f"{len(target)} replicas given; the topic's replication factor is "
                                        f"{topic.replication_factor} (every partition of a topic has the same)")
    current = topic.target(partition)
    if partition in topic.adding:
        if tuple(target) == current:
            return Outcome.NOTHING_TO_DO, "already being moved there"
        return Outcome.INVALID, (f"already being moved to {list(current)} (from {list(topic.replicas[partition])}); "
                                 "wait until it completes")
    if tuple(target) == topic.replicas[partition]:
        return Outcome.NOTHING_TO_DO, "the replicas are already those"
    dead = sorted(set(target) - set(live))
    if dead:
        return Outcome.INVALID, f"brokers {dead} are not live"
    return None


def begin(topic: TopicReplicas, targets: Mapping[int, Sequence[int]]) -> TopicReplicas:
    """The topic node with each partition of ``targets`` starting its move (step 1).

    A target holding the same brokers as now in another order is written at once (a
    reorder moves no data: no adding or removing replicas). Raises ValueError as
    TopicReplicas does (an invalid target).
    """
    replicas = list(topic.replicas)
    adding, removing = dict(topic.adding), dict(topic.removing)
    for p, target in targets.items():
        current = topic.replicas[p]
        joining = tuple(b for b in target if b not in current)
        leaving = tuple(b for b in current if b not in target)
        replicas[p] = tuple(target) + leaving
        if joining:
            adding[p], removing[p] = joining, leaving
    return TopicReplicas(tuple(replicas), topic.config, adding, removing)


def finish(topic: TopicReplicas, partitions: Collection[int]) -> TopicReplicas:
    """The topic node with the moves of ``partitions`` complete: their targets alone, no reassignment fields."""
    replicas = list(topic.replicas)
    adding, removing = dict(topic.adding), dict(topic.removing)
    for p in partitions:
        replicas[p] = topic.target(p)
        adding.pop(p, None)
        removing.pop(p, None)
    return TopicReplicas(tuple(replicas), topic.config, adding, removing)


def decide_start(current: PartitionState, *, controller_epoch: int) -> PartitionState:
    """Step 1's state: the same leader and ISR in the next leader epoch (so the leader learns the replicas)."""
    return dataclasses.replace(current, leader_epoch=current.leader_epoch + 1, controller_epoch=controller_epoch)


def ready_to_complete(state: PartitionState, target: Sequence[int]) -> bool:
    """Every target replica is in the ISR (Kafka's condition for step 2)."""
    return set(target) <= set(state.isr)


def decide_completion(current: PartitionState, target: Sequence[int], candidates: Collection[int], *,
                      controller_epoch: int) -> PartitionState | None:
    """Step 2's state: a leader in the target (the current one if it stays and is a candidate, else the first
    target replica that is a candidate and in the ISR), the ISR without the replicas leaving, the next leader
    epoch. None when no target replica can lead now (not ready, or the candidates are elsewhere): wait.

    ``candidates``: live brokers not shutting down.
    """
    if not ready_to_complete(current, target):
        return None
    isr = tuple(b for b in current.isr if b in target)
    if current.leader in target and current.leader in candidates:
        leader = current.leader
    else:
        leader = next((b for b in target if b in candidates and b in isr), NO_LEADER)
        if leader == NO_LEADER:
            return None
    return PartitionState(leader=leader, leader_epoch=current.leader_epoch + 1, isr=isr,
                          controller_epoch=controller_epoch)
