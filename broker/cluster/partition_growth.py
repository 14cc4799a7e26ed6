"""Adding partitions to a replicated topic: Admin CreatePartitions, by the controller (Kafka's ``--alter --partitions``).

Only the controller adds partitions (another broker answers NOT_CONTROLLER, as for the
reassignment RPCs): it holds the topic's assignment and is the one writer of its
partition states, so the growth cannot race a reassignment or an election. On its
worker (:meth:`ControllerPartitionGrowth.create_partitions`):

1. **Checks** (:func:`growth_problem`): a replicated topic it holds, not being deleted
   and with no reassignment under way (Kafka refuses one as REASSIGNMENT_IN_PROGRESS),
   more partitions than now and at most ``MAX_REPLICATED_PARTITIONS`` (never fewer: a
   partition holds data and its number is in consumers' offsets), and enough live
   brokers for the topic's replication factor.
2. **Placement** (:func:`new_partitions`): Kafka's ``AdminZkClient.addPartitions``: the
   creation's rule (client/replica_spread.py) over the live brokers, numbering on from
   the partitions there are, with the start index (and shift) the position of the first
   broker whose id is at least partition 0's preferred leader, so the new leaders go
   round the brokers where the topic's first one did.
3. **Write** (:func:`write_growth`): one transaction behind the controller's epoch
   check sets the topic node (the assignment with the new partitions, at the node's
   zkVersion: an AlterTopicConfig that got in first is re-read and kept) and creates
   each new partition's node and state (leader its first replica, every replica in the
   ISR, leader epoch 0: all are live and empty).
4. **Roles**: the new partitions go to every live broker in one LeaderAndIsr; the
   replicas are made, the leaders serve, and each broker learns the partitions, which
   makes its group coordinator rebalance the groups subscribed to the topic
   (``ReplicaManager.on_partitions_added``).

The answer comes once the roles are sent; ``rill topics alter --partitions`` then waits
for every partition to have a serving leader, as ``create`` does.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError, RolledBackError
from kazoo.protocol.serialization import Transaction

from rill.broker.cluster.controller_core import ControllerCore
from rill.broker.cluster.controller_context import ControllerContext
from rill.broker.cluster.partition_states import MAX_REQUEST_BYTES, ControllerMoved
from rill.broker.cluster.replicated_topics import MAX_REPLICATED_PARTITIONS
from rill.broker.replication.replica import PartitionRole
from rill.client.replica_spread import spread_replicas
from rill.client.zookeeper.replica_layout import PartitionState, TopicReplicas, partition_path, state_path, topic_path

__all__ = ["ControllerPartitionGrowth", "Growth", "GrowthResult", "growth_problem", "new_partitions", "write_growth"]

T = TypeVar("T")
WRITE_ATTEMPTS = 5


class Growth(enum.Enum):
    """The outcome of a CreatePartitions (create_partitions.py gives each its ErrorCode)."""

    ADDED = "added"
    INVALID_PARTITIONS = "invalid partitions"  # not more than now, or over the limit
    UNKNOWN_TOPIC = "unknown topic"
    NOT_REPLICATED = "not replicated"  # a 0.7-style topic
    INVALID_FACTOR = "invalid replication factor"  # fewer live brokers than the factor
    REASSIGNING = "reassignment in progress"
    FAILED = "failed"  # the topic node kept changing, or a partition node exists


@dataclass(frozen=True, slots=True)
class GrowthResult:
    """What CreatePartitions did: ``added[i]`` are the replicas of partition ``first + i`` (ADDED only)."""

    outcome: Growth
    detail: str = ""
    first: int = 0
    added: tuple[tuple[int, ...], ...] = ()


def growth_problem(ctx: ControllerContext, topic: str, count: int, brokers: Collection[int]) -> GrowthResult | None:
    """Why ``topic`` cannot grow to ``count`` partitions over ``brokers`` (step 1); None when it can."""
    replicas = ctx.topics.get(topic)
    if replicas is None:
        if topic in ctx.skipped:
            return GrowthResult(Growth.NOT_REPLICATED, f"topic {topic} is a Kafka 0.7-style topic: each broker "
                                "holds its own partitions of it (create more on a broker with rill topics create)")
        deleting = " (it is being deleted)" if topic in ctx.deleting else ""
        return GrowthResult(Growth.UNKNOWN_TOPIC, f"no replicated topic {topic}{deleting}")
    if replicas.adding:
        return GrowthResult(Growth.REASSIGNING, f"partitions {replicas.reassigning()} of topic {topic} are being "
                            "reassigned: add partitions once the move is complete")
    if count <= replicas.partitions:
        verb = "already has" if count == replicas.partitions else "cannot shrink: it has"
        return GrowthResult(Growth.INVALID_PARTITIONS, f"topic {topic} {verb} {replicas.partitions} partitions "
                            f"(asked for {count}; partitions can only be added)")
    if count > MAX_REPLICATED_PARTITIONS:
        return GrowthResult(Growth.INVALID_PARTITIONS, f"a replicated topic has at most {MAX_REPLICATED_PARTITIONS} "
                            f"partitions, not {count} (one ZooKeeper transaction holds them all)")
    if replicas.replication_factor > len(brokers):
        return GrowthResult(Growth.INVALID_FACTOR, f"replication factor {replicas.replication_factor} larger than "
                            f"available brokers {len(brokers)}")
    return None


def new_partitions(existing: TopicReplicas, count: int, brokers: Collection[int]) -> list[tuple[int, ...]]:
    """The replicas of partitions ``existing.partitions .. count-1`` (step 2), preferred leader first."""
    ordered = sorted(brokers)
    first_leader = existing.replicas[0][0]
    start = next((i for i, b in enumerate(ordered) if b >= first_leader), 0)
    return spread_replicas(ordered, count - existing.partitions, existing.replication_factor, start, start,
                           first_partition=existing.partitions)


def write_growth(zk: KazooClient, ctx: ControllerContext, topic: str,
                 added: Sequence[tuple[int, ...]]) -> GrowthResult:
    """Step 3: write the grown node and the new partitions' nodes and states; ``ctx`` holds them afterwards.

    Raises:
        ControllerMoved: the epoch check failed. KazooException: from ZooKeeper (outcome unknown).
    """
    held = ctx.topics[topic]
    first, epoch = held.partitions, ctx.epoch.epoch
    states = {first + i: PartitionState(r[0], 0, r, epoch) for i, r in enumerate(added)}
    for attempt in range(1, WRITE_ATTEMPTS + 1):
        try:
            data, stat = zk.get(topic_path(topic))
        except NoNodeError:
            return GrowthResult(Growth.UNKNOWN_TOPIC, f"topic {topic} was deleted")
        try:
            current = TopicReplicas.decode(data)
        except ValueError as malformed:
            return GrowthResult(Growth.FAILED, f"topic {topic}'s node is malformed: {malformed}")
        if current.replicas != held.replicas:
            return GrowthResult(Growth.FAILED, f"topic {topic}'s assignment changed under the controller; ask again")
        grown = TopicReplicas((*current.replicas, *added), current.config)
        tx = zk.transaction()
        tx.check(ctx.epoch.check.path, ctx.epoch.check.version)
        tx.set_data(topic_path(topic), grown.encode(), stat.version)
        for p, state in states.items():
            tx.create(partition_path(topic, p))
            tx.create(state_path(topic, p), state.encode())
        size = len(Transaction(tx.operations).serialize())
        if size > MAX_REQUEST_BYTES:
            return GrowthResult(Growth.INVALID_PARTITIONS, f"adding {len(added)} partitions makes a {size}-byte "
                                f"transaction, over ZooKeeper's limit of {MAX_REQUEST_BYTES}")
        results = tx.commit()
        failure = next(((i, r) for i, r in enumerate(results)
                        if isinstance(r, Exception) and not isinstance(r, RolledBackError)), None)
        if failure is None:
            ctx.add_topic(topic, grown, {p: (s, 0) for p, s in states.items()})
            return GrowthResult(Growth.ADDED, "", first, tuple(added))
        index, exc = failure
        if index == 0:
            raise ControllerMoved(f"adding partitions to {topic}: the controller epoch check failed")
        if index == 1 and isinstance(exc, BadVersionError):
            continue  # AlterTopicConfig wrote the node meanwhile: read it again (attempt counts)
        return GrowthResult(Growth.FAILED, f"ZooKeeper refused the new partitions of {topic} "
                            f"({type(exc).__name__} at operation {index}, attempt {attempt})")
    return GrowthResult(Growth.FAILED, f"topic {topic}'s node changed {WRITE_ATTEMPTS} times in a row; ask again")


class ControllerPartitionGrowth(ControllerCore):
    """CreatePartitions for the Controller (module docstring). Uses the attributes and methods declared here."""

    zk: KazooClient
    log: Any


    def create_partitions(self, topic: str, count: int, *, timeout_s: float = 30.0) -> GrowthResult:
        """Admin CreatePartitions: grow ``topic`` to ``count`` partitions (any thread; runs on the worker).

        Raises NotController, TimeoutError as ``Controller.controlled_shutdown``; KazooException.
        """
        return self._call(lambda: self._grow(topic, count), timeout_s, f"adding partitions to {topic}")

    def _grow(self, topic: str, count: int) -> GrowthResult:
        ctx, started = self._active(), time.monotonic()
        brokers = sorted(ctx.candidates())
        problem = growth_problem(ctx, topic, count, brokers)
        if problem is not None:
            return problem
        before = ctx.topics[topic].partitions
        result = write_growth(self.zk, ctx, topic, new_partitions(ctx.topics[topic], count, brokers))
        if result.outcome is not Growth.ADDED:
            return result
        keys = [(topic, p) for p in range(before, count)]
        self._send(ctx, ctx.live, ctx.roles(keys), full=False)
        self.log.info("controller.partitions_added", topic=topic, before=before, partitions=count,
                      replicas=[list(r) for r in result.added][:20], epoch=ctx.epoch.epoch,
                      ms=round((time.monotonic() - started) * 1000, 1))
        return result
