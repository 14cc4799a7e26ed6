"""The controller: one broker, elected through ZooKeeper, that moves partition leadership (issue 13).

Kafka 0.8's controller (replication notes, section 3) for rill's replicated topics:

- **Campaign.** Every broker runs a :class:`Controller`; it watches ``/rill/controller``
  and, when the node is absent, tries :func:`~rill.broker.cluster.partition_states.elect_controller`.
  The winner loads every replicated topic under ``/rill/topics`` (0.7 partition maps are
  skipped) into a :class:`~rill.broker.cluster.controller_context.ControllerContext`,
  elects leaders for partitions whose leader is not live, and sends every live broker a
  full LeaderAndIsr. Losing ``/rill/controller``, the session, or a write's epoch check
  (``ControllerMoved``) resigns: the context is dropped and nothing more is done.
- **Broker failure** (an id gone from the registry, or registered anew: a bounce): one
  batch for every partition it led or followed in the ISR (elect_offline with the
  topic's ``unclean.leader.election.enable`` or the broker default; remove_from_isr),
  written with :func:`~rill.broker.cluster.partition_states.update_states` behind the
  epoch check; partitions lost to a concurrent ISR write are re-read and decided again
  (at most ``max_attempts`` rounds); then one LeaderAndIsr per live broker carrying the
  changed partitions. ``controller.elections`` logs the counts and the milliseconds from
  noticing to written and to sent.
- **Broker join**: leaderless partitions it replicates are elected, then it gets a full
  LeaderAndIsr and the other brokers the changes.
- **New topic** (a child of ``/rill/topics`` holding a replicated topic): loaded, and its
  partitions sent to every live broker. A topic's **settings changed**: ``topic_config_watch``.
- **Controlled shutdown** (``controller_leader_moves``, a mixin): leadership and ISR
  membership moved off the broker; answers the partitions (factor > 1) it still leads.
- **Reassignment** (``controller_reassignments``, a mixin): moving partitions to other
  brokers (Admin AlterPartitionReassignments), resumed by a new controller; the
  automatic rebalance leaves moving partitions alone.
- **Topic deletion** (``controller_deletions``, a mixin; the steps in ``topic_deletion``): marked
  topics leave the context, every broker deletes their replicas, then their nodes go.
- **New partitions** (``partition_growth``, a mixin): Admin CreatePartitions.
- **LeaveIsr** (``controller_isr_exits``, a mixin): a broker healing a damaged replica leaves
  its ISR, another in-sync replica taking over where it leads.
- **Preferred leaders** (``controller_leader_moves``; ``preferred_election``): on demand
  (Admin ElectLeaders), and with ``RebalancePolicy.enabled`` a check every ``interval_s``
  that elects the preferred replicas of brokers leading too few of theirs.

A LeaderAndIsr carries the changed partitions to every live broker: the replicas act
on them, the others keep them as metadata (replication.proto).

Thread-safety: every ZooKeeper call and every send happens on the controller's one
worker thread, in the order the work was posted; kazoo's watches, the session
listener and the registry listener only post work. :meth:`Controller.controlled_shutdown`
and :meth:`Controller.elect_preferred_leaders` may be called from any thread (they post and
wait); the rebalance timer's thread only posts. A broker that does not answer a
send within ``request_timeout_s`` is logged, and updated again at its next change.

The writes and sends themselves are ``controller_actions``'s. Errors on the worker: ``ControllerMoved`` resigns and campaigns again; a ZooKeeper error
(the outcome of a write unknown) drops the context and, after a backoff, campaigns
again, which reloads everything if this broker still holds ``/rill/controller``.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import WatchedEvent

from rill.broker.cluster.controller_actions import (Decide, Resends, elect_and_write, log_elections, ms,
                                                   reread, send_leader_and_isr)
from rill.broker.cluster.controller_context import ControllerContext, decide_reconcile, unclean_for
from rill.broker.cluster.controller_deletions import ControllerDeletions
from rill.broker.cluster.controller_isr_exits import ControllerIsrExits
from rill.broker.cluster.controller_leader_moves import ControllerLeaderMoves
from rill.broker.cluster.controller_reassignments import ControllerReassignments
from rill.broker.cluster.partition_growth import ControllerPartitionGrowth
from rill.broker.cluster.partition_states import (ControllerEpoch, ControllerMoved, PartitionKey, elect_controller,
                                                  read_controller, read_states, read_topic)
from rill.broker.cluster.preferred_election import RebalancePolicy
from rill.broker.cluster.replica_control_servicer import (BrokerNotAvailable, NotController, ReplicaControlClient,
                                                          StaleBrokerEpoch)
from rill.broker.cluster.replicated_topics import create_topic, read_broker_epoch
from rill.broker.cluster.topic_config_watch import changed_topic, reload_topic_config
from rill.broker.replication.replica import PartitionRole
from rill.client.clock import ThreadTimer
from rill.client.errors import BrokerError
from rill.client.zookeeper.registry import RILL_TOPICS_PATH, BrokerRegistration, RegistryView
from rill.client.zookeeper.replica_layout import CONTROLLER_PATH, NO_LEADER

__all__ = ["Controller", "create_topic", "read_broker_epoch"]

log = structlog.get_logger(__name__)

T = TypeVar("T")


class Controller(ControllerReassignments, ControllerDeletions, ControllerPartitionGrowth, ControllerIsrExits,
                 ControllerLeaderMoves):
    """The controller role of one broker: campaigns, and acts while elected. See the module docstring."""

    def __init__(self, zk: KazooClient, broker_id: int, registry: RegistryView, client: ReplicaControlClient, *,
                 unclean_default: bool, request_timeout_s: float = 5.0, max_attempts: int = 5,
                 retry_backoff_s: float = 0.5, rebalance: RebalancePolicy = RebalancePolicy(enabled=False)) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.registry = registry
        self.client = client
        self.unclean_default = unclean_default
        self.request_timeout_s = request_timeout_s
        self.max_attempts = max_attempts
        self.retry_backoff_s = retry_backoff_s
        self.rebalance = rebalance
        self._timer: ThreadTimer | None = None
        self._resends = Resends(self._later, retry_backoff_s)
        self.log = log.bind(broker_id=broker_id)
        self._tasks: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._ctx: ControllerContext | None = None
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    # -- life cycle and queries (any thread) ---------------------------------------------------

    @property
    def is_active(self) -> bool:
        """True while this broker is the controller (holds a context)."""
        return self._ctx is not None

    @property
    def epoch(self) -> int | None:
        """The controller epoch while active; None otherwise."""
        ctx = self._ctx
        return None if ctx is None else ctx.epoch.epoch

    def offline_partitions(self) -> int:
        """Partitions without a leader while this broker is the controller (0 otherwise): any thread."""
        ctx = self._ctx
        if ctx is None:
            return 0
        return sum(1 for state, _ in list(ctx.states.values()) if state.leader == NO_LEADER)

    def start(self) -> None:
        """Start the worker and campaign. The registry must be started (its snapshot is the live set)."""
        self.registry.add_listener(self._on_snapshot)
        self.zk.add_listener(self._on_state)
        self._timer = ThreadTimer(name="rill-controller-timer")  # before the campaign, which may schedule work
        self._thread = threading.Thread(target=self._run, name="rill-controller", daemon=True)
        self._thread.start()
        self._post(self._campaign)
        if self.rebalance.enabled:
            self._schedule_rebalance()

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop acting; if controller, delete ``/rill/controller`` so another broker takes over at once. Idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._timer is not None:
            self._timer.stop()
        self._post(self._release)
        self._tasks.put(None)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        self.zk.remove_listener(self._on_state)
        self.client.close()

    def _call(self, work: Callable[[], T], timeout_s: float, what: str) -> T:
        """Run ``work`` on the worker and wait for it (see controlled_shutdown's Raises)."""
        done: Future[T] = Future()
        self._post(lambda: self._into(done, work))
        try:
            return done.result(timeout_s)
        except FutureTimeout:
            raise TimeoutError(f"{what} was not done in {timeout_s:g}s") from None
        except ControllerMoved as exc:
            raise NotController(f"resigned during {what}: {exc}") from exc

    # -- posting (kazoo's and the registry's threads) ----------------------------------------------

    def _post(self, task: Callable[[], None]) -> None:
        self._tasks.put(task)

    def _on_state(self, state: str) -> None:
        if self._closed.is_set():
            return
        if state == KazooState.LOST:
            self._post(lambda: self._resign("session lost"))
        elif state == KazooState.CONNECTED:
            self._post(self._campaign)

    def _on_controller_watch(self, _event: Any) -> None:
        if not self._closed.is_set():
            self._post(self._campaign)

    def _on_topics_watch(self, _event: Any) -> None:
        if not self._closed.is_set():
            self._post(self._on_topics)

    def _on_topic_watch(self, event: WatchedEvent) -> None:
        if (topic := changed_topic(event)) is not None and not self._closed.is_set():
            self._post(lambda: self._on_topic_config(topic))

    def _on_snapshot(self, _snapshot: Any) -> None:
        if not self._closed.is_set():
            noticed = time.monotonic()
            self._post(lambda: self._on_brokers(noticed))

    # -- the worker ---------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            task = self._tasks.get()
            if task is None:
                return
            try:
                task()
            except ControllerMoved as exc:
                self._resign(f"controller moved: {exc}")
                self._post(self._campaign)
            except Exception as exc:
                if isinstance(exc, KazooException):
                    self.log.warning("controller.zookeeper_failed", error=repr(exc))
                else:
                    self.log.exception("controller.failed")
                self._resign("error; reloading")
                if not self._closed.wait(self.retry_backoff_s):
                    self._post(self._campaign)

    @staticmethod
    def _into(done: Future[T], work: Callable[[], T]) -> None:
        """Run ``work`` into ``done``; an exception other than a refusal also goes on to the worker loop
        (to resign or reload as any failure does)."""
        try:
            done.set_result(work())
        except (NotController, StaleBrokerEpoch, BrokerNotAvailable) as exc:
            done.set_exception(exc)
        except BaseException as exc:
            done.set_exception(exc)
            raise

    def _campaign(self) -> None:
        """Become or stay the controller if ``/rill/controller`` is free or ours; resign if another's."""
        if self._closed.is_set():
            return
        stat = self.zk.exists(CONTROLLER_PATH, watch=self._on_controller_watch)
        if stat is not None and stat.ephemeralOwner != self.zk.client_id[0]:
            self._resign("another broker is the controller")
            return
        if stat is not None and self._ctx is not None:
            return
        won = elect_controller(self.zk, self.broker_id)
        self.zk.exists(CONTROLLER_PATH, watch=self._on_controller_watch)
        if won is None:
            self._resign("another broker won the election")
            return
        self._become_controller(won)

    def _resign(self, reason: str) -> None:
        if self._ctx is not None:
            self.log.info("controller.resigned", epoch=self._ctx.epoch.epoch, reason=reason)
            self._ctx = None

    def _release(self) -> None:
        """On close: resign, and delete ``/rill/controller`` if this session holds it."""
        was_active = self._ctx is not None
        self._resign("closing")
        if not was_active:
            return
        try:
            _, stat = self.zk.get(CONTROLLER_PATH)
            if stat.ephemeralOwner == self.zk.client_id[0]:
                self.zk.delete(CONTROLLER_PATH, version=stat.version)
        except (NoNodeError, KazooException) as exc:
            self.log.info("controller.release_skipped", error=repr(exc))

    # -- becoming the controller --------------------------------------------------------------

    def _become_controller(self, won: ControllerEpoch) -> None:
        started = time.monotonic()
        ctx = ControllerContext(won, live=self._live_brokers())
        self._ctx = ctx
        self._load_topics(ctx, self._topic_children())
        self._begin_deletions(ctx)
        loaded = time.monotonic()
        self.log.info("controller.context_loaded", epoch=won.epoch, topics=len(ctx.topics),
                      partitions=len(ctx.states), live=sorted(ctx.live), ms=ms(started, loaded))
        changed, lost = self._elect(ctx, sorted(ctx.states), self._reconcile(ctx))
        self._resume_reassignments(ctx)
        self._send(ctx, ctx.live, ctx.roles(), full=True)
        log_elections(self.log, "controller_failover", ctx, [], sorted(ctx.states), changed, lost, started, loaded)

    def _live_brokers(self) -> dict[int, BrokerRegistration]:
        """The registry's brokers that have a gRPC port (only those can be told anything)."""
        return {b: r for b, r in self.registry.snapshot.brokers.items() if r.grpc_port > 0}

    def _topic_children(self) -> list[str]:
        """``/rill/topics``'s children, with a watch (on the path itself while it does not exist)."""
        while True:
            try:
                return sorted(self.zk.get_children(RILL_TOPICS_PATH, watch=self._on_topics_watch))
            except NoNodeError:
                if self.zk.exists(RILL_TOPICS_PATH, watch=self._on_topics_watch) is None:
                    return []

    def _load_topics(self, ctx: ControllerContext, names: Sequence[str]) -> list[str]:
        """Read the replicated topics among ``names`` into ``ctx``; returns those added."""
        added = []
        for topic in names:
            try:
                replicas = read_topic(self.zk, topic, watch=self._on_topic_watch)
            except (ValueError, BrokerError) as exc:
                self.log.error("controller.topic_unreadable", topic=topic, error=str(exc))
                replicas = None
            if replicas is None:
                ctx.skipped.add(topic)
                continue
            states = read_states(self.zk, topic, range(replicas.partitions))
            if len(states) != replicas.partitions:
                self.log.error("controller.states_missing", topic=topic,
                               missing=sorted(set(range(replicas.partitions)) - set(states)))
            ctx.add_topic(topic, replicas, states)
            added.append(topic)
        return added

    # -- events -----------------------------------------------------------------------------------

    def _on_topics(self) -> None:
        ctx = self._ctx
        if ctx is None:
            return
        started = time.monotonic()
        children = self._topic_children()
        for topic in set(ctx.topics) - set(children):
            ctx.drop_topic(topic)
        added = self._load_topics(ctx, [t for t in children
                                        if t not in ctx.topics and t not in ctx.skipped and t not in ctx.deleting])
        if not added:
            return
        keys = sorted(key for key in ctx.states if key[0] in added)
        changed, lost = self._elect(ctx, keys, self._reconcile(ctx))
        self._send(ctx, ctx.live, ctx.roles(keys), full=False)
        self.log.info("controller.topics_added", epoch=ctx.epoch.epoch, topics=added, partitions=len(keys),
                      elected=len(changed), ms=ms(started))

    def _on_topic_config(self, topic: str) -> None:
        if (ctx := self._ctx) is not None:
            self._send(ctx, ctx.live, ctx.roles(reload_topic_config(self.zk, ctx, topic, self._on_topic_watch)),
                       full=False)

    def _on_brokers(self, noticed: float) -> None:
        """Compare the registry with the brokers acted on: failures first (gone or bounced), then joins."""
        ctx = self._ctx
        if ctx is None:
            return
        current = self._live_brokers()
        bounced = {b for b in current.keys() & ctx.live.keys() if current[b] != ctx.live[b]}
        gone = (ctx.live.keys() - current.keys()) | bounced
        joined = (current.keys() - ctx.live.keys()) | bounced
        for broker in gone:
            self.client.forget(self.client.address(ctx.live[broker]))
        ctx.live = {b: r for b, r in current.items() if b not in bounced}
        ctx.shutting_down &= ctx.live.keys()
        if gone:
            self._broker_failure(ctx, gone, noticed)
        if joined:
            ctx.live = current
            self._broker_join(ctx, joined, noticed)

    def _broker_failure(self, ctx: ControllerContext, dead: Collection[int], noticed: float) -> None:
        # Leaders change their ISRs in ZooKeeper without telling the controller: read the states of the
        # partitions the dead brokers hold before deciding, or one a leader re-added stays in an ISR for good.
        reread(self.zk, ctx, ctx.hosted_on(dead))
        keys = ctx.touching(dead)
        changed, lost = self._elect(ctx, keys, self._reconcile(ctx))
        written = time.monotonic()
        self._send(ctx, ctx.live, ctx.roles(changed), full=False)
        log_elections(self.log, "broker_failure", ctx, dead, keys, changed, lost, noticed, written)

    def _broker_join(self, ctx: ControllerContext, joined: Collection[int], noticed: float) -> None:
        keys = sorted({key for broker in joined for key in ctx.offline_with(broker)})
        changed, lost = self._elect(ctx, keys, self._reconcile(ctx))
        written = time.monotonic()
        self._send(ctx, joined, ctx.roles(), full=True)
        self._send(ctx, ctx.live.keys() - set(joined), ctx.roles(changed), full=False)
        log_elections(self.log, "broker_join", ctx, joined, keys, changed, lost, noticed, written)

    def _active(self) -> ControllerContext:
        """The context. Raises NotController (naming the controller ZooKeeper knows) while not active."""
        ctx = self._ctx
        if ctx is None:
            found = read_controller(self.zk)
            raise NotController(f"broker {self.broker_id} is not the controller",
                                -1 if found is None else found.broker_id)
        return ctx

    def _checked_broker(self, broker_id: int, broker_epoch: int | None) -> ControllerContext:
        """The context, once ``broker_id`` is live and (if given) in ``broker_epoch`` (a request of its own)."""
        ctx = self._active()
        if broker_id not in ctx.live:
            raise BrokerNotAvailable(f"broker {broker_id} is not live to the controller")
        if broker_epoch is not None:
            current = read_broker_epoch(self.zk, broker_id)
            if current != broker_epoch:
                raise StaleBrokerEpoch(f"broker {broker_id}: epoch {broker_epoch} is not the current {current}")
        return ctx

    def _later(self, delay_s: float, work: Callable[[], None]) -> None:
        """Post ``work`` to the worker after ``delay_s`` (nothing once closed)."""
        if self._timer is not None and not self._closed.is_set():
            self._timer.schedule(delay_s, lambda: self._post(work))

    def _resend(self) -> None:
        """Every role, in full, to the live brokers that missed a LeaderAndIsr (controller_actions.Resends)."""
        ctx = self._ctx
        targets = self._resends.due(ctx.live if ctx is not None else ())
        if ctx is not None and targets:
            self.log.info("controller.resend", brokers=sorted(targets))
            self._resends.resending(True)
            try:
                self._send(ctx, targets, ctx.roles(), full=True)
            finally:
                self._resends.resending(False)

    # -- elections, writes, sends ---------------------------------------------------------------------

    def _reconcile(self, ctx: ControllerContext) -> Decide:
        live, epoch = ctx.candidates(), ctx.epoch.epoch
        return lambda key, state: decide_reconcile(
            state, ctx.replicas(key), live, unclean=unclean_for(ctx.topics[key[0]], self.unclean_default),
            controller_epoch=epoch)

    def _elect(self, ctx: ControllerContext, keys: Sequence[PartitionKey],
               decide: Decide) -> tuple[list[PartitionKey], int]:
        """:func:`elect_and_write` with this controller's ZooKeeper and attempts. Raises ControllerMoved."""
        return elect_and_write(self.zk, ctx, keys, decide, self.max_attempts)

    def _send(self, ctx: ControllerContext, targets: Collection[int], roles: Iterable[PartitionRole], *,
              full: bool) -> None:
        """:func:`send_leader_and_isr` from this controller; a broker that missed it is sent everything again."""
        failed = send_leader_and_isr(self.client, ctx, self.broker_id, targets, roles, full=full,
                                     timeout_s=self.request_timeout_s)
        self._resends.add(failed, self._resend)
