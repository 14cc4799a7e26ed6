"""Every replica this broker holds, its role, and the leader's side of replication.

The controller tells the broker who leads each replicated partition in which epoch
(:meth:`ReplicaManager.apply_roles`, from the ReplicaControl gRPC service). The manager
makes this broker the leader of some replicas (recording where its epoch begins, and
tracking its followers in a :class:`~rill.broker.replication.leader_state.LeaderState`)
and a follower of others (handing them to the replica fetchers, which copy the
leader's bytes; a follower a reassignment adds is marked ``throttled`` until the ISR
lists it), and stops and deletes the replicas a reassignment moved away or whose topic
is deleted (replica_removal.py). For the data plane it answers three questions:

- :meth:`leader` -- may this partition be written or read here? Only on its leader:
  anything else is :class:`~rill.client.errors.NotLeaderForPartition` with nothing done.
- :attr:`Replica.high_watermark` -- where committed data ends: consumers read below it
  and ``acks=all`` waits for it (:meth:`wait_committed`).
- :meth:`follower_fetched` -- a follower's fetch moved its log end: maybe the high
  watermark moves and waiting acknowledgements and fetches are released, maybe the
  follower may join the ISR.

ISR changes are proposals written to ZooKeeper by the :class:`IsrWriter` with the
state's zkVersion, and applied only once written (isr_writer.py says why that fences a
replaced leader). Followers that fall behind for ``replica.lag.time.max.ms`` are
proposed out every half of it.

Thread-safety: everything runs on the broker's event loop, except
:meth:`apply_roles`, which any thread may call: it creates missing replica logs and
stops fetchers on the calling thread, then applies the roles on the loop and waits
(:meth:`~rill.broker.dataplane.event_loop.EventLoop.submit`; once the loop has stopped,
the broker stopping, it fails at once with
:class:`~rill.broker.dataplane.event_loop.LoopStopped`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

import structlog

from rill.broker.dataplane.storage import Loop
from rill.broker.log.log import Log
from rill.broker.log.waiters import Callback, ErrorCallback, FlushWaiters
from rill.broker.replication.isr_writer import IsrWriter, IsrWriteResult
from rill.broker.replication.leader_state import LeaderState
from rill.broker.replication.replica import PartitionRole, Replica, Role
from rill.broker.replication.replica_removal import delete_replicas, leaving_replicas
from rill.client.errors import BrokerError, ErrorCode, NotLeaderForPartition
from rill.client.protocol import requests as rq
from rill.client.structs import Address
from rill.client.zookeeper.registry import RegistryView
from rill.client.zookeeper.replica_layout import LEADER_DURING_DELETE, PartitionState

__all__ = ["FollowerFetching", "ReplicaManager", "ReplicaStore"]

log = structlog.get_logger(__name__)
Key = tuple[str, int]
APPLY_TIMEOUT_S = 30.0


class ReplicaStore(Protocol):
    """The replica logs of the data directory (rill.broker.log.manager.LogManager)."""

    def replicas(self) -> Mapping[Key, Log]: ...

    def create_replica(self, topic: str, partition: int) -> Log: ...

    def delete_replica(self, topic: str, partition: int) -> bool: ...


class FollowerFetching(Protocol):
    """The replica fetchers (rill.broker.replication.replica_fetcher.ReplicaFetchers)."""

    def add(self, replica: Replica, leader: Address) -> None: ...

    def remove(self, replicas: Iterable[Replica]) -> None: ...


class ReplicaManager:
    """This broker's replicas and their roles (see the module docstring)."""

    def __init__(self, broker_id: int, store: ReplicaStore, loop: Loop, fetchers: FollowerFetching,
                 isr_writer: IsrWriter | None, *, lag_max_ms: int = 30_000, min_insync: int = 1,
                 clock: Callable[[], float] = time.time) -> None:
        self.broker_id = broker_id
        self.store = store
        self.loop = loop
        self.fetchers = fetchers
        self.isr_writer = isr_writer
        self.lag_max_ms = lag_max_ms
        self.min_insync = min_insync
        self.clock = clock
        self.controller_epoch = -1
        self.leaderships_taken = 0  # times a replica here became leader (any epoch), for the metrics
        self.replicas: dict[Key, Replica] = {key: Replica(log_, broker_id) for key, log_ in store.replicas().items()}
        self._held_topics = {topic for topic, _ in self.replicas}  # topics with a replica here (O(1) lookups)
        self.brokers: dict[int, rq.BrokerInfo] = {}
        self.partition_leaders: dict[str, dict[int, int]] = {}
        """topic -> partition -> leader (-1: none) of every replicated partition the controller described."""
        self.on_high_watermark: list[Callable[[str, int], object]] = []
        """Called on the loop with (topic, partition) when a leader's high watermark moves."""
        self.on_role_change: list[Callable[[str, int], object]] = []
        """Called on the loop with (topic, partition) after its role changed (parked fetches answer)."""
        self.on_topics_deleted: list[Callable[[list[str]], object]] = []
        """Called on the loop with the topics a LeaderAndIsr deletes (their committed offsets go)."""
        self.on_partitions_added: list[Callable[[], object]] = []
        """Called on the loop after a LeaderAndIsr named a replicated partition not known before (groups rebalance)."""
        self._committed: dict[Key, FlushWaiters] = {}
        self._stopping = False  # in a controlled shutdown: follow no leader any more
        self.inter_broker_listener: str | None = None  # security.inter.broker.protocol (None: the registered port)
        self.registry: RegistryView | None = None
        """ZooKeeper's registry (set by the broker in a cluster): names of replicated topics before the controller speaks."""
        self._shrink_timer = loop.call_later(self.lag_max_ms / 2000, self._check_isr)

    def _now_ms(self) -> float:
        return self.clock() * 1000.0

    # -- roles, from the controller -----------------------------------------------------------

    def apply_roles(self, controller_id: int, controller_epoch: int, roles: Sequence[PartitionRole],
                    brokers: Sequence[rq.BrokerInfo], full: bool = False) -> dict[Key, int]:
        """Apply the controller's decisions; returns an error code per partition (0: applied). Any thread.

        ``roles`` name every partition whose state changed (``full``: every replicated partition
        of the cluster); this broker acts on those it replicates and keeps the rest as metadata.
        The ReplicaControl service refuses a request from an older controller epoch before this.

        Raises:
            LoopStopped: the broker is stopping: its event loop had stopped, or stopped before
                applying them (at once, not after APPLY_TIMEOUT_S). Nothing was applied, though
                a missing replica log may have been created.
            TimeoutError: the (running) event loop did not apply them within APPLY_TIMEOUT_S.
        """
        codes: dict[Key, int] = {}
        mine = [r for r in roles if self.broker_id in r.replicas]
        leaving = leaving_replicas(self.replicas, self.broker_id, roles)
        self.fetchers.remove(leaving)  # before the loop forgets them: no fetcher touches a replica being deleted
        for role in mine:
            key = (role.topic, role.partition)
            if key not in self.replicas:
                try:
                    self.store.create_replica(role.topic, role.partition)
                except BrokerError as exc:
                    codes[key] = int(exc.code)
                    log.error("replica.create_failed", topic=role.topic, partition=role.partition, error=str(exc))
        known = self.replicas  # changed only on the loop; one lookup at a time is safe from here
        leading = [known[(r.topic, r.partition)] for r in mine
                   if (r.topic, r.partition) in known and r.leader in (self.broker_id, -1)]
        self.fetchers.remove(leading)  # a leader (or an offline replica) must not be fetching any more
        done = self.loop.submit(lambda: self._apply(controller_epoch, roles, brokers, codes))
        result = done.result(timeout=APPLY_TIMEOUT_S)  # LoopStopped at once when the loop is gone
        failed = delete_replicas(self.store, [r for r in leaving if self.replicas.get((r.topic, r.partition)) is not r])
        return {**result, **{key: int(ErrorCode.STORAGE_ERROR) for key in failed}}

    def _apply(self, controller_epoch: int, roles: Sequence[PartitionRole], brokers: Sequence[rq.BrokerInfo],
               codes: dict[Key, int]) -> dict[Key, int]:
        self.controller_epoch = max(self.controller_epoch, controller_epoch)
        self.brokers.update({b.broker_id: b for b in brokers})
        if self._learn_leaders(roles):
            for added in self.on_partitions_added:
                added()
        deleted = sorted({r.topic for r in roles if r.leader == LEADER_DURING_DELETE})
        for forget in self.on_topics_deleted if deleted else ():
            forget(deleted)
        for key, log_ in self.store.replicas().items():
            if key not in self.replicas:
                self.replicas[key] = Replica(log_, self.broker_id)
                self._held_topics.add(key[0])
        for role in roles:
            if self.broker_id not in role.replicas:
                self._remove(role)  # metadata only, unless this broker holds a replica moved away
                continue
            key = (role.topic, role.partition)
            replica = self.replicas.get(key)
            if replica is None or key in codes:
                codes.setdefault(key, int(ErrorCode.STORAGE_ERROR))
                continue
            if role.leader_epoch < replica.leader_epoch:
                codes[key] = int(ErrorCode.FENCED_LEADER_EPOCH)  # an older decision than ours: ignored
                continue
            codes[key] = 0
            replica.apply_log_settings(role.log_settings)
            if role.leader_epoch == replica.leader_epoch and replica.role is not Role.NONE:
                self._update_settings(replica, role)  # already applied, but a topic's settings may have changed
                continue
            if role.leader == self.broker_id:
                self._become_leader(replica, role)
            elif role.leader < 0:
                self._go_offline(replica, role)
            else:
                self._become_follower(replica, role)
            for listener in self.on_role_change:
                listener(role.topic, role.partition)
        return codes

    @staticmethod
    def _update_settings(replica: Replica, role: PartitionRole) -> None:
        """The topic settings a role carries, applied to a replica already in its epoch (topic_config_watch)."""
        if replica.min_insync != role.min_insync:
            log.info("replica.config_changed", topic=replica.topic, partition=replica.partition,
                     min_insync_replicas=role.min_insync, was=replica.min_insync)
            with replica.lock:
                replica.min_insync = role.min_insync

    def _become_leader(self, replica: Replica, role: PartitionRole) -> None:
        with replica.lock:
            end = replica.log.end_offset
            replica.epochs.assign(role.leader_epoch, end)
            state = LeaderState(self.broker_id, role.leader_epoch, role.replicas, role.isr, role.zk_version,
                                high_watermark=replica.high_watermark, epoch_start_offset=end, now_ms=self._now_ms())
            replica.leader_state, replica.role, replica.throttled = state, Role.LEADER, False
            self.leaderships_taken += 1  # rill_leadership_changes_total
            replica.leader_id, replica.leader_epoch, replica.replicas = self.broker_id, role.leader_epoch, role.replicas
            replica.min_insync = role.min_insync
        key = (replica.topic, replica.partition)
        if key not in self._committed:  # a new epoch of the same leader keeps the acknowledgements waiting
            self._committed[key] = FlushWaiters(state.high_watermark, log)
        log.info("replica.became_leader", topic=replica.topic, partition=replica.partition,
                 leader_epoch=role.leader_epoch, isr=list(role.isr), epoch_start_offset=end,
                 high_watermark=state.high_watermark)
        self._update_high_watermark(replica)

    def _become_follower(self, replica: Replica, role: PartitionRole) -> None:
        self._resign(replica)
        with replica.lock:
            replica.role, replica.leader_id = Role.FOLLOWER, role.leader
            replica.leader_epoch, replica.replicas = role.leader_epoch, role.replicas
            replica.throttled = self.broker_id in role.adding and self.broker_id not in role.isr
        if self._stopping:
            log.info("replica.not_following", topic=replica.topic, partition=replica.partition, leader=role.leader,
                     reason="controlled shutdown")
            return
        leader = self.brokers.get(role.leader)
        log.info("replica.became_follower", topic=replica.topic, partition=replica.partition, leader=role.leader,
                 leader_epoch=role.leader_epoch, log_end=replica.log.end_offset)
        if leader is None:
            log.warning("replica.leader_unknown", topic=replica.topic, partition=replica.partition, leader=role.leader)
            return
        self.fetchers.add(replica, self._fetch_address(role.leader, leader))

    def _fetch_address(self, leader_id: int, leader: rq.BrokerInfo) -> tuple[str, int]:
        """Where to fetch from ``leader``: its address on the inter-broker listener
        (``security.inter.broker.protocol``), as its registration in ZooKeeper says."""
        registration = self.registry.snapshot.brokers.get(leader_id) if self.registry is not None else None
        if registration is None or self.inter_broker_listener is None:
            return leader.host, leader.port
        host, port, _ = registration.address_for(self.inter_broker_listener)
        return host, port

    def _remove(self, role: PartitionRole) -> None:
        """Stop holding a replica the controller moved away (reassignment): it leads and follows no more, and
        the caller deletes its log once the loop is done with it. An older role than the replica's is ignored."""
        key = (role.topic, role.partition)
        replica = self.replicas.get(key)
        if replica is None or role.leader_epoch < replica.leader_epoch:
            return
        self._resign(replica)
        with replica.lock:
            replica.role, replica.leader_id, replica.throttled = Role.NONE, role.leader, False
            replica.leader_epoch, replica.replicas = role.leader_epoch, role.replicas
        del self.replicas[key]
        if not any(topic == role.topic for topic, _ in self.replicas):
            self._held_topics.discard(role.topic)
        log.info("replica.removed", topic=role.topic, partition=role.partition, leader=role.leader,
                 leader_epoch=role.leader_epoch, replicas=list(role.replicas), log_end=replica.log.end_offset)
        for listener in self.on_role_change:
            listener(role.topic, role.partition)

    def _go_offline(self, replica: Replica, role: PartitionRole) -> None:
        self._resign(replica)
        with replica.lock:
            replica.role, replica.leader_id = Role.NONE, -1
            replica.leader_epoch, replica.replicas = role.leader_epoch, role.replicas
        log.warning("replica.offline", topic=replica.topic, partition=replica.partition, leader_epoch=role.leader_epoch)

    def _resign(self, replica: Replica) -> None:
        """Stop leading: waiting acknowledgements fail (the data may or may not be committed later)."""
        state = replica.leader_state
        if state is None:
            return
        with replica.lock:
            replica.follower_high_watermark = state.high_watermark
            replica.leader_state = None
        waiters = self._committed.pop((replica.topic, replica.partition), None)
        if waiters is not None:
            waiters.fail(NotLeaderForPartition(f"{replica.topic}-{replica.partition}: leadership moved"))

    def stop_following(self) -> None:
        """A controlled shutdown begins: stop every fetcher and follow no leader from now on, so this
        broker never fetches its way back into an ISR it is leaving (it would hold the new leader's
        high watermark until ``replica.lag.time.max.ms``). Any thread."""
        self._stopping = True
        self.fetchers.remove(list(self.replicas.values()))

    # -- the data plane's questions --------------------------------------------------------

    def leader(self, topic: str, partition: int) -> Replica | None:
        """The replica if this broker leads it; None for a partition that is not replicated.

        Raises:
            NotLeaderForPartition: a replica this broker holds but does not lead.
        """
        replica = self.replicas.get((topic, partition))
        if replica is None:
            return None
        if replica.role is not Role.LEADER:
            raise NotLeaderForPartition(f"broker {self.broker_id} does not lead {topic}-{partition} "
                                        f"(leader {replica.leader_id}, epoch {replica.leader_epoch})")
        return replica

    def appended(self, replica: Replica) -> None:
        """The leader appended (an ISR of the leader alone commits at once)."""
        self._update_high_watermark(replica)

    def wait_committed(self, replica: Replica, offset: int, callback: Callback, on_error: ErrorCallback) -> None:
        """Call ``callback`` once the high watermark reaches ``offset``; ``on_error`` if leadership is lost first."""
        waiters = self._committed.get((replica.topic, replica.partition))
        if waiters is None:
            on_error(NotLeaderForPartition(f"{replica.topic}-{replica.partition}: not the leader"))
            return
        waiters.register(offset, callback, on_error)

    def min_insync_for(self, replica: Replica) -> int:
        """The ``min.insync.replicas`` in force for ``replica``: its topic's, else the broker's."""
        return replica.min_insync or self.min_insync

    def in_sync_count(self, replica: Replica) -> int:
        """The ISR's size while this broker leads ``replica`` (0 otherwise)."""
        state = replica.leader_state
        return state.in_sync_count() if state is not None else 0

    def _learn_leaders(self, roles: Sequence[PartitionRole]) -> bool:
        """Keep every described partition's leader for METADATA (copy-on-write: other threads read it), forgetting
        those of a topic being deleted (leader LEADER_DURING_DELETE); True when a partition is new here."""
        changed: dict[str, dict[int, int]] = {}
        grew = False
        for role in roles:
            leaders = changed.setdefault(role.topic, dict(self.partition_leaders.get(role.topic, {})))
            if role.leader == LEADER_DURING_DELETE:
                leaders.pop(role.partition, None)
                continue
            grew = grew or role.partition not in leaders
            leaders[role.partition] = role.leader
        if changed:
            self.partition_leaders = {t: p for t, p in {**self.partition_leaders, **changed}.items() if p}
        return grew

    def placement(self, topic: str) -> tuple[int, ...] | None:
        """The leader of each partition of a replicated topic (-1: none known or offline), or None. Any thread."""
        leaders = self.partition_leaders.get(topic)
        if not leaders:
            return None
        return tuple(leaders.get(p, -1) for p in range(max(leaders) + 1))

    def replicated_topics(self) -> list[str]:
        """Every replicated topic the controller described. Any thread."""
        return list(self.partition_leaders)

    def led_partitions(self, topic: str) -> list[int]:
        """The partitions of ``topic`` this broker leads, as the controller last said. Any thread."""
        return sorted(p for p, leader in self.partition_leaders.get(topic, {}).items() if leader == self.broker_id)

    def holds_topic(self, topic: str) -> bool:
        """Whether a replicated topic of this name is known here, from the controller or from ZooKeeper's
        registry (it is never auto-created the 0.7 way: a produce racing its creation must not make a
        0.7 topic of that name on this broker)."""
        if topic in self.partition_leaders or topic in self._held_topics:
            return True
        return self.registry is not None and topic in self.registry.snapshot.replicated_topics

    def follower_fetched(self, replica: Replica, follower_id: int, fetch_offset: int) -> None:
        """A follower fetched from ``fetch_offset`` (its log end): track it, maybe grow the ISR or the HW."""
        state = replica.leader_state
        if state is None:
            return
        before = state.high_watermark
        proposal = state.on_follower_fetch(follower_id, fetch_offset, self._now_ms(), replica.log.end_offset)
        if proposal is not None:
            self._propose_isr(replica, state, proposal)
        self._update_high_watermark(replica, moved=state.high_watermark > before)

    def _update_high_watermark(self, replica: Replica, *, moved: bool = False) -> None:
        """Recompute the leader's HW; when it moved (here or already, ``moved``) release what waits for it."""
        state = replica.leader_state
        if state is None:
            return
        if not state.update_high_watermark(replica.log.end_offset) and not moved:
            return
        waiters = self._committed.get((replica.topic, replica.partition))
        if waiters is not None:
            waiters.advance(state.high_watermark)
        for listener in self.on_high_watermark:
            listener(replica.topic, replica.partition)

    # -- ISR ----------------------------------------------------------------------------------

    def _check_isr(self) -> None:
        self._shrink_timer = self.loop.call_later(self.lag_max_ms / 2000, self._check_isr)
        now = self._now_ms()
        for replica in self.replicas.values():
            state = replica.leader_state
            if state is None:
                continue
            proposal = state.shrink_proposal(now, replica.log.end_offset, self.lag_max_ms)
            if proposal is not None:
                log.info("isr.shrinking", topic=replica.topic, partition=replica.partition,
                         out_of_sync=sorted(state.isr - proposal), leader_end=replica.log.end_offset)
                self._propose_isr(replica, state, proposal)

    def _propose_isr(self, replica: Replica, state: LeaderState, isr: frozenset[int]) -> None:
        ordered = tuple(b for b in state.replicas if b in isr)
        if self.isr_writer is None:  # no ZooKeeper (tests): nothing to fence against
            before = state.high_watermark
            state.apply_isr(ordered, state.zk_version, replica.log.end_offset)
            self._update_high_watermark(replica, moved=state.high_watermark > before)
            return
        state.pending_isr = isr
        new = PartitionState(leader=self.broker_id, leader_epoch=state.leader_epoch, isr=ordered,
                             controller_epoch=max(self.controller_epoch, 0))

        def written(result: IsrWriteResult) -> None:
            self.loop.call_soon_threadsafe(lambda: self._isr_written(replica, state, ordered, result))

        self.isr_writer.write(replica.topic, replica.partition, new, state.zk_version, written)

    def _isr_written(self, replica: Replica, state: LeaderState, isr: tuple[int, ...], result: IsrWriteResult) -> None:
        if replica.leader_state is not state:
            return  # leadership changed meanwhile: the new state came from the controller
        if result.written:
            before = state.high_watermark
            state.apply_isr(isr, result.zk_version, replica.log.end_offset)
            self._update_high_watermark(replica, moved=state.high_watermark > before)
            return
        state.pending_isr = None
        if result.current is not None and result.current.leader_epoch == state.leader_epoch:
            state.zk_version = result.zk_version  # someone rewrote the node in our epoch: try again later
        self._update_high_watermark(replica)  # a join not written no longer holds the HW

    def close(self) -> None:
        self._shrink_timer.cancel()
