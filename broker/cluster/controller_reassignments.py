"""The controller's reassignment role: the Admin calls, the periodic check, the resumption after a failover.

A mixin of :class:`~rill.broker.cluster.controller.Controller` (it uses its worker,
its ZooKeeper session and its sends); the rules are reassignment.py's and the writes
reassignment_steps.py's.

- :meth:`alter_reassignments`, :meth:`list_reassignments`, :meth:`alter_throttle` may be
  called from any thread (Admin gRPC workers): they run on the controller's worker and
  wait, raising NotController and TimeoutError as ``Controller.controlled_shutdown``.
- While any partition is moving, the worker checks every :data:`CHECK_INTERVAL_S`
  (``_check_reassignments``) whether some can complete: a new replica's joining the ISR
  is written to ZooKeeper by the leader, which does not tell the controller, so the
  controller reads the states of the moving partitions (Kafka watches each one's node;
  a read of a few nodes twice a second costs less than a watch per partition to keep).
- A new controller resumes the moves its node lists (:meth:`_resume_reassignments`,
  called from ``Controller._become_controller`` before its full LeaderAndIsr).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.client import KazooClient

from rill.broker.cluster.controller_core import ControllerCore
from rill.broker.cluster.controller_context import ControllerContext
from rill.broker.cluster.partition_states import PartitionKey
from rill.broker.cluster.reassignment import Outcome, ReassignmentResult
from rill.broker.cluster.reassignment_steps import (Asked, advance_reassignments, read_throttle, reassigning,
                                                    resume_reassignments, start_reassignments, write_throttle)
from rill.broker.replication.replica import PartitionRole
from rill.client.topic_names import is_valid_topic
from rill.client.zookeeper.replica_layout import delete_marker_path

__all__ = ["CHECK_INTERVAL_S", "ControllerReassignments", "Ongoing"]

T = TypeVar("T")

CHECK_INTERVAL_S = 0.5


@dataclass(frozen=True, slots=True)
class Ongoing:
    """One partition being moved: every replica now (target first), those joining and leaving, its ISR and leader."""

    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int


class ControllerReassignments(ControllerCore):
    """Reassignment for the Controller (module docstring). Uses the attributes and methods declared here."""

    zk: KazooClient
    max_attempts: int
    log: Any
    _ctx: ControllerContext | None
    _check_scheduled: bool = False


    # -- any thread ---------------------------------------------------------------------------

    def alter_reassignments(self, asked: Asked, *, timeout_s: float = 30.0) -> list[ReassignmentResult]:
        """Admin AlterPartitionReassignments: start moving each (topic, partition) to its target replicas.

        Returns one result per partition asked, in (topic, partition) order, once the moves
        are written (not completed). Raises NotController, TimeoutError.
        """
        return self._call(lambda: self._start(asked), timeout_s, "the partition reassignment")

    def list_reassignments(self, topics: Sequence[str] = (), *, timeout_s: float = 30.0) -> tuple[list[Ongoing], int]:
        """Admin ListPartitionReassignments: (the moves under way of ``topics`` (all when empty), in key order;
        the replication throttle in bytes/s, 0: none). Raises NotController, TimeoutError."""
        return self._call(lambda: self._list(topics), timeout_s, "listing the reassignments")

    def alter_throttle(self, bytes_per_second: int, *, timeout_s: float = 30.0) -> int:
        """Admin AlterReplicationThrottle: set (0: remove) the throttle; returns the previous rate.

        Every live broker gets it at once in a full LeaderAndIsr. Raises NotController,
        TimeoutError, ValueError (a negative rate).
        """
        return self._call(lambda: self._throttle(bytes_per_second), timeout_s, "setting the replication throttle")

    # -- the worker ---------------------------------------------------------------------------

    def _start(self, asked: Asked) -> list[ReassignmentResult]:
        ctx = self._active()
        marked = {t for t in {a[0] for a in asked}
                  if is_valid_topic(t) and self.zk.exists(delete_marker_path(t)) is not None}
        refused = [ReassignmentResult(t, p, Outcome.INVALID, f"topic {t} is marked for deletion")
                   for t, p in sorted({(a[0], a[1]) for a in asked if a[0] in marked})]
        results, changed = start_reassignments(self.zk, ctx, [a for a in asked if a[0] not in marked],
                                               self.max_attempts)
        self._send(ctx, ctx.live, ctx.roles(changed), full=False)
        self._schedule_check()
        return sorted(results + refused, key=lambda r: (r.topic, r.partition))

    def _list(self, topics: Sequence[str]) -> tuple[list[Ongoing], int]:
        ctx = self._active()
        out = []
        for topic, p in reassigning(ctx):
            if topics and topic not in topics:
                continue
            replicas, state = ctx.topics[topic], ctx.states[(topic, p)][0]
            out.append(Ongoing(topic, p, replicas.replicas[p], replicas.adding[p], replicas.removing[p], state.isr,
                               state.leader))
        return out, ctx.throttle

    def _throttle(self, bytes_per_second: int) -> int:
        ctx = self._active()
        previous = write_throttle(self.zk, ctx, bytes_per_second)
        self._send(ctx, ctx.live, ctx.roles(), full=True)
        return previous

    def _resume_reassignments(self, ctx: ControllerContext) -> None:
        """On becoming the controller (before its full LeaderAndIsr): the throttle, and step 1 again for every move."""
        ctx.throttle = read_throttle(self.zk)
        resume_reassignments(self.zk, ctx, self.max_attempts)
        self._schedule_check()

    def _schedule_check(self) -> None:
        if not self._check_scheduled:
            self._check_scheduled = True
            self._later(CHECK_INTERVAL_S, self._check_reassignments)

    def _check_reassignments(self) -> None:
        """Complete what can be; send the changes; check again while moves remain."""
        self._check_scheduled = False
        ctx = self._ctx
        if ctx is None:
            return
        changed, _ = advance_reassignments(self.zk, ctx, self.max_attempts)
        self._send(ctx, ctx.live, ctx.roles(changed), full=False)
        if reassigning(ctx):
            self._schedule_check()

    def _reassigning(self) -> set[PartitionKey]:
        """The partitions being moved (the automatic leader rebalance leaves them alone, as Kafka's)."""
        ctx = self._ctx
        return set(reassigning(ctx)) if ctx is not None else set()
