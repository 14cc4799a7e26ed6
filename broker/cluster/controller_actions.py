"""What the controller does to the outside: fenced state writes with retries, and LeaderAndIsr sends.

:func:`elect_and_write` decides a batch of partitions in memory, writes every change
with one :func:`~rill.broker.cluster.partition_states.update_states` (chunked,
pipelined transactions behind the controller's epoch check), and for partitions whose
zkVersion moved meanwhile (a leader wrote its ISR) re-reads just those and decides
again, a bounded number of times. :func:`send_leader_and_isr` sends one request, the
same for all, to each target broker at once and logs every failure: a broker that
did not answer is updated at its next change.

Functions of the controller's worker thread (they update the context they are given).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import grpc
import structlog
from kazoo.client import KazooClient

from rill.broker.cluster.controller_context import ControllerContext
from rill.broker.cluster.partition_states import ControllerMoved, PartitionKey, read_states, update_states
from rill.broker.cluster.replica_control_servicer import ReplicaControlClient, brokers_to_proto, role_to_proto
from rill.broker.replication.replica import PartitionRole
from rill.client.zookeeper.replica_layout import NO_LEADER, PartitionState
from rill.v1 import replication_pb2 as rpb

__all__ = ["Decide", "elect_and_write", "log_elections", "ms", "send_leader_and_isr"]

log = structlog.get_logger(__name__)

Decide = Callable[[PartitionKey, PartitionState], "PartitionState | None"]


def elect_and_write(zk: KazooClient, ctx: ControllerContext, keys: Sequence[PartitionKey], decide: Decide,
                    max_attempts: int) -> tuple[list[PartitionKey], int]:
    """Decide ``keys`` in memory, write the changes fenced by ``ctx.epoch``, re-read and redo lost ones.

    ``ctx.states`` holds every written state with its new zkVersion afterwards.

    Returns:
        (the partitions written, in key order; the number of lost writes retried).

    Raises:
        ControllerMoved: the epoch check failed, or a re-read state carries a newer controller's epoch.
        KazooException: from ZooKeeper (writes in flight have an unknown outcome).
    """
    pending, changed, retried = list(keys), set(), 0
    for _ in range(max_attempts):
        updates = {}
        for key in pending:
            state, version = ctx.states[key]
            new = decide(key, state)
            if new is not None:
                updates[key] = (new, version)
        if not updates:
            break
        result = update_states(zk, updates, ctx.epoch.check)
        for key, version in result.versions.items():
            ctx.states[key] = (updates[key][0], version)
            changed.add(key)
        if result.missing:
            log.error("controller.state_missing", partitions=sorted(result.missing)[:20])
        if not result.lost:
            break
        retried += len(result.lost)
        pending = reread(zk, ctx, result.lost)
    else:
        log.error("controller.election_gave_up", attempts=max_attempts, partitions=pending[:20])
    return sorted(changed), retried


def reread(zk: KazooClient, ctx: ControllerContext, keys: Collection[PartitionKey]) -> list[PartitionKey]:
    """Read ``keys``' states again into ``ctx``; returns those found. Raises ControllerMoved (see elect_and_write)."""
    found: list[PartitionKey] = []
    for topic in sorted({t for t, _ in keys}):
        fresh = read_states(zk, topic, sorted(p for t, p in keys if t == topic))
        for p, (state, version) in fresh.items():
            if state.controller_epoch > ctx.epoch.epoch:
                raise ControllerMoved(f"{topic}-{p} was written by controller epoch {state.controller_epoch}")
            ctx.states[(topic, p)] = (state, version)
            found.append((topic, p))
    return sorted(found)


def send_leader_and_isr(client: ReplicaControlClient, ctx: ControllerContext, controller_id: int,
                        targets: Collection[int], roles: Iterable[PartitionRole], *, full: bool,
                        timeout_s: float) -> set[int]:
    """One LeaderAndIsr (``roles`` and every live broker) to each live broker among ``targets``, all at once.

    Nothing is sent when ``roles`` is empty and ``full`` is false. Never raises for a
    broker's failure: each is logged (``controller.send_failed``, ``.request_refused``,
    ``.partition_errors``). Returns the brokers whose call failed (unreachable, timed
    out): they missed this request (:class:`Resends`).
    """
    partitions = [role_to_proto(role) for role in roles]
    if not partitions and not full:
        return set()
    request = rpb.LeaderAndIsrRequest(controller_id=controller_id, controller_epoch=ctx.epoch.epoch,
                                      partitions=partitions, live_brokers=brokers_to_proto(ctx.brokers()), full=full,
                                      replication_throttle_bytes_per_second=ctx.throttle)
    by_address = {client.address(ctx.live[b]): b for b in targets if b in ctx.live}
    answers = client.leader_and_isr_all({a: request for a in by_address}, timeout_s)
    failed: set[int] = set()
    for to, answer in answers.items():
        broker = by_address[to]
        if isinstance(answer, grpc.RpcError):
            code = answer.code() if callable(getattr(answer, "code", None)) else None
            log.warning("controller.send_failed", to=broker, address=to, code=str(code), partitions=len(partitions))
            failed.add(broker)
        elif answer.error != rpb.ReplicaControlError.NONE:
            log.warning("controller.request_refused", to=broker, epoch=ctx.epoch.epoch,
                        error=rpb.ReplicaControlError.Code.Name(answer.error))
        elif any(p.code for p in answer.partitions):
            log.warning("controller.partition_errors", to=broker,
                        errors=[(p.topic, p.partition, p.code) for p in answer.partitions if p.code][:20])
    return failed


MAX_RESEND_BACKOFF_S = 5.0


class Resends:
    """Brokers that missed a LeaderAndIsr (their call failed: a cut link, a stalled process). Each is sent every
    role again, in full, ``backoff_s`` later, and again until a full request reaches it or it leaves the live
    set (Kafka's controller keeps a queue per broker for the same reason): a leader elected while unreachable
    would otherwise never learn it leads, and a broker that missed an epoch change would act in the old one.

    The sends block the controller's worker like every other (up to ``controller.socket.timeout.ms`` for a
    broker that does not answer), so the back-off doubles while resends keep failing, up to
    :data:`MAX_RESEND_BACKOFF_S`, and starts again at ``backoff_s`` once a round reaches every broker.
    The controller's worker calls :meth:`add` and :meth:`due`; the timer's thread only posts.
    """

    def __init__(self, schedule: Callable[[float, Callable[[], None]], object], backoff_s: float) -> None:
        self._schedule = schedule
        self.backoff_s = backoff_s
        self.missed: set[int] = set()
        self._pending = False
        self._rounds_failed = 0
        self._resending = False

    def add(self, failed: Collection[int], resend: Callable[[], None]) -> None:
        """Note ``failed`` and make sure ``resend`` runs (on the worker, through ``schedule``) after the back-off."""
        if not failed:
            return
        self.missed.update(failed)
        if self._resending:
            self._rounds_failed += 1
        if not self._pending:
            self._pending = True
            delay = min(MAX_RESEND_BACKOFF_S, self.backoff_s * 2 ** min(self._rounds_failed, 16))
            self._schedule(delay, resend)

    def due(self, live: Collection[int]) -> set[int]:
        """The brokers to send to now (those still live); they are forgotten until they fail again."""
        self._pending = False
        targets, self.missed = self.missed & set(live), set()
        if not targets:
            self._rounds_failed = 0
        return targets

    def resending(self, on: bool) -> None:
        """Around the worker's resend: a failure inside it lengthens the next back-off; a success resets it."""
        if not on and not self._pending:
            self._rounds_failed = 0
        self._resending = on


def log_elections(logger: Any, reason: str, ctx: ControllerContext, brokers: Collection[int],
                  keys: Sequence[PartitionKey], changed: Sequence[PartitionKey], lost: int,
                  noticed: float, written: float) -> None:
    """``controller.elections``: what a batch decided, and the milliseconds from noticing to written and to now."""
    offline = sum(1 for key in changed if ctx.states[key][0].leader == NO_LEADER)
    logger.info("controller.elections", reason=reason, epoch=ctx.epoch.epoch, brokers=sorted(brokers),
                partitions=len(keys), changed=len(changed), offline=offline, lost_retried=lost,
                written_ms=ms(noticed, written), total_ms=ms(noticed))


def ms(start: float, end: float | None = None) -> float:
    """Milliseconds from ``start`` to ``end`` (default: now) on the monotonic clock, to 0.1."""
    return round(((time.monotonic() if end is None else end) - start) * 1000, 1)
