"""The consumer's background thread: registration, rebalancing and auto-commit (0.7's
ZKRebalancerListener, ZKSessionExpireListener and auto-commit scheduler in one loop).

It rebalances whenever it is triggered (the group's ids children, the broker
registry: ids, topics, partition counts, replicated topics' leaders) without the
application calling anything. One rebalance, as Kafka 0.7 does it (seed 000 "Consumer
rebalancing algorithm"):

1. read the members and their subscriptions (re-arming the ids watch) and the
   registry; compute this member's share (:func:`group_assignment`); if nothing it
   depends on changed since the last successful rebalance, stop here (if a partition
   it owns is now fetched elsewhere, a broker's new address or a replicated
   partition's new leader, the fetchers restart from the consumed offsets first);
2. stop delivering and fetching, commit the consumed offsets (auto commit), delete
   our owner nodes;
3. create an owner node for each partition of our share; if any is held by someone
   else, delete the ones just created and fail the attempt;
4. read the committed offsets (after the claim: the previous owner committed before
   releasing), start delivering and fetching.

A failed attempt is retried after ``rebalance.backoff.ms``, ``rebalance.retries.max``
attempts in all; then an error is logged (``zookeeper_consumer.rebalance_failed``),
the consumer owns nothing, and the whole round runs again ``rebalance.backoff.ms``
later, until it succeeds.

Sessions: when the connection drops (SUSPENDED), delivery pauses, since another
member may own our partitions by the time we hear from ZooKeeper again; when the
session is LOST, everything is revoked at once (without committing: we no longer own
the partitions). On the new session the ids node is registered again and the group
rebalanced.

Locking: ``lock`` is held by this thread for each attempt and each commit, and by
the application's ``commit()`` and ``close()``, so a commit never interleaves with a
release.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError

from rill.client.structs import Address
from rill.client.zookeeper.assignment import Subscription, group_assignment
from rill.client.zookeeper.fetcher_threads import FetcherPool, FetchTarget
from rill.client.zookeeper.consumer_nodes import ConsumerIdInUse, ZkGroup
from rill.client.zookeeper.registry import BrokerRegistration, ClusterSnapshot, RegistryView
from rill.client.zookeeper.replicated_view import fetch_broker, partition_key, topic_partitions
from rill.client.zookeeper.streams import ANY_REPLICA, OwnedPartition, PartitionKey, StreamBuffers

__all__ = ["Rebalancer", "RebalanceConfig"]

log = structlog.get_logger(__name__)

ZK_ERRORS = (KazooException, KazooTimeoutError)


class RebalanceConfig:
    def __init__(self, retries_max: int, backoff_s: float, autocommit: bool, autocommit_interval_s: float) -> None:
        self.retries_max = retries_max
        self.backoff_s = backoff_s
        self.autocommit = autocommit
        self.autocommit_interval_s = autocommit_interval_s


class Rebalancer:
    """Keeps one member registered, rebalanced and committed, on its own thread."""

    def __init__(self, zk: KazooClient, group: ZkGroup, view: RegistryView, buffers: StreamBuffers,
                 fetchers: FetcherPool, subscription: Subscription, stream_of: Callable[[str, int], int],
                 config: RebalanceConfig) -> None:
        self.zk = zk
        self.group = group
        self.view = view
        self.buffers = buffers
        self.fetchers = fetchers
        self.subscription = subscription
        self.stream_of = stream_of
        self.config = config
        self.lock = threading.RLock()
        self.first_round = threading.Event()  # set after the first rebalance round ends (either way)
        self.log = log.bind(group=group.dirs.group, consumer=group.consumer)
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._due: float | None = 0.0  # when to rebalance next (None: when triggered)
        self._next_commit = time.monotonic() + config.autocommit_interval_s
        self._session = 0  # the session our ids node was registered with
        self._last: tuple[Any, ...] | None = None  # inputs and fetch placement of the last successful rebalance
        self._thread = threading.Thread(target=self._run, name=f"rill-zk-rebalance-{group.consumer}", daemon=True)

    # -- life cycle -----------------------------------------------------------------------

    def start(self) -> None:
        self.zk.add_listener(self._on_state)
        self.view.add_listener(self._on_registry)
        self._thread.start()

    def trigger(self, reason: str) -> None:
        """Ask for a rebalance (never blocks)."""
        self.log.debug("zookeeper_consumer.rebalance_triggered", reason=reason)
        self._due = time.monotonic()
        self._wake.set()

    def stop(self, wait_s: float) -> bool:
        """Ask the thread to end and wait up to ``wait_s`` for it; True when it has ended.

        The caller then releases everything. The thread can be stuck in a ZooKeeper
        call while the connection is down: such calls return when the client is stopped.
        """
        self._closing.set()
        self._wake.set()
        self.zk.remove_listener(self._on_state)
        self.first_round.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=wait_s)
        return not self._thread.is_alive()

    def abandon(self) -> None:
        """Close without ZooKeeper: stop delivering and fetching, commit nothing.

        Our owner and ids nodes vanish when the session ends.
        """
        self.buffers.revoke()
        self.fetchers.signal_stop()

    def commit(self) -> int:
        """Write the consumed offsets that changed since the last commit; returns how many."""
        with self.lock:
            generation = self.buffers.generation
            owned = self.buffers.owned()
            changed = {k: v.consumed for k, v in owned.items() if v.consumed is not None and v.consumed != v.committed}
            if changed:
                self.group.write_offsets(changed)
                self.buffers.mark_committed(generation, changed)
                self.log.debug("zookeeper_consumer.offsets_committed", partitions=len(changed))
            return len(changed)

    def release_all(self) -> None:
        """Stop delivering and fetching, commit (auto commit) and delete our owner nodes."""
        with self.lock:
            owned = self.buffers.revoke()
            self.fetchers.stop()
            if self.config.autocommit:
                changed = {k: v.consumed for k, v in owned.items()
                           if v.consumed is not None and v.consumed != v.committed}
                if changed:
                    self.group.write_offsets(changed)
            released = self.group.release()
            self._last = None
            if owned or released:
                self.log.info("zookeeper_consumer.partitions_released", partitions=len(owned), owner_nodes=released)

    # -- triggers (ZooKeeper's threads: never block) -----------------------------------------

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self.buffers.lose()
            self.fetchers.signal_stop()
            self.log.warning("zookeeper_consumer.session_lost")
        elif state == KazooState.SUSPENDED:
            self.buffers.set_paused(True)
            self.log.warning("zookeeper_consumer.disconnected", note="delivery paused")
        else:
            self.buffers.set_paused(False)
        self._wake.set()

    def _on_members(self, _event: Any) -> None:
        self.trigger("members changed")

    def _on_registry(self, _snapshot: ClusterSnapshot) -> None:
        self.trigger("broker registry changed")

    # -- the loop -------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._closing.is_set():
            self._wake.wait(self._timeout())
            self._wake.clear()
            if self._closing.is_set():
                return
            try:
                self._step()
            except ZK_ERRORS as exc:
                self.log.warning("zookeeper_consumer.zookeeper_error", error=repr(exc))
                self._due = time.monotonic() + self.config.backoff_s
            except ConsumerIdInUse as exc:
                self.log.error("zookeeper_consumer.consumer_id_in_use", error=str(exc), retry_in_s=self.config.backoff_s)
                self._due = time.monotonic() + self.config.backoff_s
                self.first_round.set()
            except Exception:
                self.log.exception("zookeeper_consumer.rebalancer_error")
                self._due = time.monotonic() + self.config.backoff_s

    def _timeout(self) -> float:
        if self.zk.state != KazooState.CONNECTED:
            return 1.0  # the state listener wakes us sooner
        now = time.monotonic()
        deadlines = [self._due] if self._due is not None else []
        if self.config.autocommit:
            deadlines.append(self._next_commit)
        return max(0.0, min(deadlines) - now) if deadlines else 1.0

    def _step(self) -> None:
        if self.zk.state != KazooState.CONNECTED:
            return  # woken again by the next state change
        session = self.group.session
        if session != self._session:
            self._register(session)
        now = time.monotonic()
        if self._due is not None and now >= self._due:
            self._synced_rebalance()
        if self.config.autocommit and time.monotonic() >= self._next_commit:
            self._next_commit = time.monotonic() + self.config.autocommit_interval_s
            self.commit()

    def _register(self, session: int) -> None:
        with self.lock:
            if self._session:
                self.log.info("zookeeper_consumer.new_session", old_session=hex(self._session), session=hex(session))
                self.buffers.lose()
                self.fetchers.stop()
            self.group.new_session()
            self._last = None
            self.group.register(self.subscription)
            self._session = session
            self._due = time.monotonic()
            self.log.info("zookeeper_consumer.registered", path=self.group.dirs.id_path(self.group.consumer),
                          session=hex(session))

    def _synced_rebalance(self) -> None:
        self._due = None
        for attempt in range(self.config.retries_max):
            if self._closing.is_set() or self.zk.state != KazooState.CONNECTED or self.group.session != self._session:
                self._due = time.monotonic()  # the loop handles the session first
                return
            try:
                with self.lock:
                    done = self._attempt(attempt)
            except ZK_ERRORS as exc:
                self.log.warning("zookeeper_consumer.rebalance_attempt_error", attempt=attempt, error=repr(exc))
                done = False
            if done:
                self.first_round.set()
                return
            try:
                self.release_all()
            except ZK_ERRORS as exc:
                self.log.warning("zookeeper_consumer.release_error", error=repr(exc))
            if self._closing.wait(self.config.backoff_s):
                return
        self.log.error("zookeeper_consumer.rebalance_failed", attempts=self.config.retries_max,
                       retry_in_s=self.config.backoff_s,
                       message=f"{self.group.consumer} can't rebalance after {self.config.retries_max} attempts; "
                               "it owns no partitions until a later attempt succeeds")
        self._due = time.monotonic() + self.config.backoff_s
        self.first_round.set()

    def _attempt(self, attempt: int) -> bool:
        """One rebalance; True when done (or nothing to do), False to retry."""
        epoch = self.buffers.epoch
        members = self.group.members(watch=self._on_members)
        if self.group.consumer not in members:
            self.log.warning("zookeeper_consumer.registration_missing", note="registering again")
            self.group.register(self.subscription)
            members = self.group.members(watch=self._on_members)
        snapshot = self.view.snapshot
        plan = group_assignment(self.group.consumer, members, topic_partitions(snapshot))
        keys = {partition_key(topic, name): thread for (topic, name), thread in plan.owned.items()}
        placement = _placement(snapshot, keys, self.fetchers.config.listener)
        inputs = (self._session, plan.inputs)
        if self._last is not None and self._last[0] == inputs:
            if self._last[1] != placement:
                self._restart_fetchers(snapshot)
                self._last = (inputs, placement)
            return True
        self.log.info("zookeeper_consumer.rebalance_begin", attempt=attempt, members=len(members))
        self.release_all()
        conflicts: dict[str, str] = {}
        for key, thread in sorted(keys.items()):
            holder = self.group.claim(key, thread)
            if holder is not None:
                conflicts[f"{key.topic}/{key.name}"] = holder
        if conflicts:
            self.log.info("zookeeper_consumer.waiting_for_owner", attempt=attempt, owned_by_others=conflicts,
                          note="waiting for the partition ownership to be deleted")
            self.group.release()
            return False
        offsets = self.group.read_offsets(keys)
        owned = {key: OwnedPartition(self.stream_of(key.topic, self._thread_index(thread)), thread,
                                     offsets[key], offsets[key]) for key, thread in keys.items()}
        generation = self.buffers.assign(owned, epoch)
        if generation is None:
            self.log.warning("zookeeper_consumer.session_lost_during_rebalance")
            return False
        self._start_fetchers(generation, owned, snapshot)
        self._last = (inputs, placement)
        self.log.info("zookeeper_consumer.rebalanced", attempt=attempt, generation=generation,
                      partitions={thread: sorted(f"{k.topic}/{k.name}" for k, t in keys.items() if t == thread)
                                  for thread in sorted(set(keys.values()))})
        return True

    def _thread_index(self, thread: str) -> int:
        return int(thread[len(self.group.consumer) + 1:])

    def _restart_fetchers(self, snapshot: ClusterSnapshot) -> None:
        """Same ownership, but a broker moved or a partition has a new leader: fetch again from the consumed offsets."""
        owned = self.buffers.revoke()
        self.fetchers.stop()
        kept = {k: OwnedPartition(v.stream, v.thread, v.consumed, v.committed) for k, v in owned.items()}
        generation = self.buffers.assign(kept, self.buffers.epoch)
        if generation is not None:
            self._start_fetchers(generation, kept, snapshot)
            self.log.info("zookeeper_consumer.fetchers_restarted", generation=generation)

    def _start_fetchers(self, generation: int, owned: dict[PartitionKey, OwnedPartition],
                        snapshot: ClusterSnapshot) -> None:
        targets: dict[BrokerRegistration, list[FetchTarget]] = {}
        for key, entry in sorted(owned.items()):
            broker = fetch_broker(snapshot, key)
            if broker is None and key.broker_id == ANY_REPLICA:
                self.log.warning("zookeeper_consumer.no_leader", topic=key.topic, partition=key.name,
                                 note="owned but not fetched until it has a leader")
                continue
            if broker is None:
                self.log.warning("zookeeper_consumer.broker_not_registered", broker_id=key.broker_id,
                                 topic=key.topic, partition=key.name, note="owned but not fetched until it returns")
                continue
            targets.setdefault(broker, []).append(FetchTarget(key, entry.consumed))
        self.fetchers.start(generation, targets)


def _placement(snapshot: ClusterSnapshot, keys: Mapping[PartitionKey, str],
               listener: str) -> dict[PartitionKey, Address | None]:
    """Where each owned partition is fetched from (its broker's, or its leader's, ``listener``
    address); None: nowhere now."""
    brokers = {key: fetch_broker(snapshot, key) for key in keys}
    return {key: None if b is None else b.address_for(listener)[:2] for key, b in brokers.items()}
