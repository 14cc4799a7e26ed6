"""Moving leadership on purpose: a controlled shutdown and preferred leader elections (a Controller mixin).

- **Controlled shutdown** (:meth:`ControllerLeaderMoves.controlled_shutdown`, called by
  a stopping broker through ReplicaControl): leadership and ISR membership move off the
  broker (``controller_context.decide_shutdown``); the answer lists the partitions it
  still leads that another live replica could take, so the broker retries only those.
- **Preferred leaders** (``preferred_election``): :meth:`ControllerLeaderMoves.elect_preferred_leaders`
  on demand (Admin ElectLeaders) and, with ``RebalancePolicy.enabled``, a check every
  ``interval_s`` that elects the preferred replicas of brokers leading too few of
  theirs (partitions being reassigned are left alone).

Both public calls may come from any thread: they post to the controller's worker and
wait (``ControllerCore._call``); the work itself runs on the worker.
"""

from __future__ import annotations

import time
from typing import Any

from kazoo.client import KazooClient

from rill.broker.cluster.controller_actions import log_elections, reread
from rill.broker.cluster.controller_context import ControllerContext, decide_shutdown
from rill.broker.cluster.controller_core import ControllerCore
from rill.broker.cluster.preferred_election import (ElectionResult, RebalancePolicy, Requested, rebalance_targets,
                                                    run_preferred_election)

__all__ = ["ControllerLeaderMoves"]


class ControllerLeaderMoves(ControllerCore):
    """Controlled shutdown and preferred leader elections, on the Controller's worker."""

    zk: KazooClient
    log: Any
    max_attempts: int
    rebalance: RebalancePolicy
    _ctx: ControllerContext | None

    def controlled_shutdown(self, broker_id: int, broker_epoch: int | None = None, *,
                            timeout_s: float = 30.0) -> list[tuple[str, int]]:
        """Move leadership and ISR membership off ``broker_id`` (it is stopping).

        ``broker_epoch``: the czxid of its ``/brokers/ids/[id]`` node (None: not checked).

        Returns:
            The partitions of topics with factor > 1 it still leads (no other live ISR
            member could take them), in (topic, partition) order; [] when all moved.

        Raises:
            NotController: this broker is not the controller (``controller_id``: the one known).
            BrokerNotAvailable: the broker is not live to the controller.
            StaleBrokerEpoch: ``broker_epoch`` is not its current registration's.
            TimeoutError: not done within ``timeout_s`` (it may still happen).
        """
        return self._call(lambda: self._shutdown(broker_id, broker_epoch), timeout_s,
                          f"the controlled shutdown of broker {broker_id}")

    def elect_preferred_leaders(self, partitions: Requested, *, timeout_s: float = 30.0) -> list[ElectionResult]:
        """Admin ElectLeaders: ``preferred_election.run_preferred_election`` of ``partitions`` (None: all), one
        result per partition asked. Raises NotController and TimeoutError as :meth:`controlled_shutdown`."""
        return self._call(lambda: self._preferred(partitions, "preferred_election"), timeout_s,
                          "the preferred leader election")

    def _shutdown(self, broker_id: int, broker_epoch: int | None) -> list[tuple[str, int]]:
        ctx = self._checked_broker(broker_id, broker_epoch)
        started = time.monotonic()
        ctx.shutting_down.add(broker_id)
        reread(self.zk, ctx, ctx.hosted_on({broker_id}))  # the leaders' own ISR changes (see _broker_failure)
        keys = ctx.touching({broker_id})
        live, stopping, epoch = frozenset(ctx.live), frozenset(ctx.shutting_down), ctx.epoch.epoch
        changed, lost = self._elect(ctx, keys, lambda key, state: decide_shutdown(
            state, ctx.replicas(key), live, stopping, controller_epoch=epoch))
        written = time.monotonic()
        self._send(ctx, ctx.live, ctx.roles(changed), full=False)
        log_elections(self.log, "controlled_shutdown", ctx, [broker_id], keys, changed, lost, started, written)
        # still led here, and another replica is live to take it (one rejoining the ISR, on a retry); a partition
        # with no other live replica cannot move, and retrying would only delay the stop (the last broker of a cluster)
        return [key for key in ctx.led_by(broker_id, min_factor=2)
                if any(r != broker_id and r in live and r not in stopping for r in ctx.replicas(key))]

    def _preferred(self, requested: Requested, reason: str) -> list[ElectionResult]:
        ctx, started = self._active(), time.monotonic()
        results, changed, lost = run_preferred_election(self.zk, ctx, requested, self.max_attempts)
        written = time.monotonic()
        self._send(ctx, ctx.live, ctx.roles(changed), full=False)
        leaders = {ctx.states[key][0].leader for key in changed}
        asked = [(r.topic, r.partition) for r in results]
        log_elections(self.log, reason, ctx, leaders, asked, changed, lost, started, written)
        return results

    def _auto_rebalance(self) -> None:
        """The periodic check (``preferred_election.rebalance_targets``); the next one is scheduled after it."""
        try:
            if self._ctx is not None:
                moving = self._reassigning()
                keys = [k for k in rebalance_targets(self.zk, self._ctx, self.rebalance.percentage) if k not in moving]
                if keys:
                    self._preferred(keys, "auto_rebalance")
        finally:
            self._schedule_rebalance()

    def _schedule_rebalance(self) -> None:
        self._later(self.rebalance.interval_s, self._auto_rebalance)
