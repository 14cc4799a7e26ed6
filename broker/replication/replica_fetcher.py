"""The follower side of replication: which leader each partition is fetched from (Kafka's ReplicaFetcherManager).

A broker following partitions of a replicated topic copies each one's bytes from its
leader with REPLICA_FETCH. :class:`ReplicaFetchers` keeps one
:class:`~rill.broker.replication.fetcher_thread.ReplicaFetcherThread` per leader broker
(one connection, one request for all that leader's partitions), made when a first
partition needs it and ended when its last partition goes. What a thread does with
each answer is fetcher_thread.py's and fetch_block.py's.

The replica manager drives it as the controller's decisions arrive::

    fetchers = ReplicaFetchers(FetcherSettings(broker_id=2))
    fetchers.add(replica, ("broker1", 9092))     # follow replica from that leader
    fetchers.remove([replica])                   # e.g. this broker becomes its leader
    fetchers.describe()                          # lag and last fetch, per partition
    fetchers.close()                             # at shutdown

The barrier: a fetcher thread holds ``replica.lock`` around every append or truncation
of that replica, and checks under it that the replica is still its own. So once a
replica is out of a thread's set, taking and releasing its lock waits out anything in
progress; :meth:`ReplicaFetchers.add`, :meth:`~ReplicaFetchers.remove` and
:meth:`~ReplicaFetchers.close` return only after that, and no fetcher touches a removed
replica afterwards, even while a long poll that includes it is still in flight. A role
change made under ``replica.lock`` (a new leader epoch) also fences the fetcher: a
block is applied only with the epoch and log end its request was built with.

Thread-safety: every method may be called from any thread (the broker's event loop,
the gRPC thread), but never while holding the lock of a replica passed to it (it takes
that lock: ``threading.Lock`` is not re-entrant). Lock order: ``ReplicaFetchers._lock``,
then a thread's condition; replica locks are taken with neither held.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

import structlog

from rill.broker.replication.fetcher_thread import FetcherSettings, FollowerStatus, ReplicaFetcherThread
from rill.broker.replication.replica import Replica
from rill.broker.replication.replication_throttle import ReplicationThrottle
from rill.client.security.client_security import ClientSecurity
from rill.client.structs import Address, TopicPartition

__all__ = ["FetcherSettings", "FollowerStatus", "ReplicaFetchers", "ReplicaFetcherThread"]

_logger = structlog.get_logger(__name__)


class ReplicaFetchers:
    """The replica fetcher threads of one broker, one per leader address (module docstring)."""

    def __init__(self, settings: FetcherSettings, throttle: ReplicationThrottle | None = None,
                 security: ClientSecurity | None = None) -> None:
        self.settings = settings
        self.security = security  # how fetchers connect to leaders (security.inter.broker.protocol)
        self.throttle = throttle  # the replication throttle on replicas being added (shared by every thread)
        self._lock = threading.Lock()
        self._threads: dict[Address, ReplicaFetcherThread] = {}
        self._leaders: dict[TopicPartition, Address] = {}  # who each followed partition is fetched from
        self._ending: list[ReplicaFetcherThread] = []  # shut down, maybe still in their last request
        self._closed = False

    def add(self, replica: Replica, leader: Address) -> None:
        """Fetch ``replica`` from ``leader`` (``(host, port)``) from now on, at once.

        A partition fetched from another leader is removed from that fetcher first, and
        this returns only when that fetcher no longer touches it. Adding a partition its
        leader's fetcher already has starts it afresh (no back-off; a block in flight is
        dropped). The thread for ``leader`` is started if there is none.

        Raises:
            RuntimeError: after :meth:`close`.
        """
        key = TopicPartition(replica.topic, replica.partition)
        with self._lock:
            if self._closed:
                raise RuntimeError("replica fetchers are closed")
            moved = self._detach([key], keep=leader)
            thread = self._threads.get(leader)
            if thread is None:
                label = str(replica.leader_id) if replica.leader_id >= 0 else f"{leader[0]}:{leader[1]}"
                thread = self._threads[leader] = ReplicaFetcherThread(leader, self.settings, label, self.throttle,
                                                                      self.security)
                thread.start()
            replaced = thread.add_partition(replica)
            self._leaders[key] = leader
        _logger.info("replica_fetcher.added", topic=replica.topic, partition=replica.partition,
                     leader=f"{leader[0]}:{leader[1]}", leader_id=replica.leader_id, leader_epoch=replica.leader_epoch,
                     fetch_offset=replica.log.end_offset, fetcher=thread.name)
        _barrier(moved + ([replaced] if replaced is not None else []))

    def remove(self, replicas: Iterable[Replica]) -> None:
        """Stop fetching ``replicas`` (those not fetched are ignored).

        Returns once no fetcher thread touches them: a block in flight for one of them
        is dropped when it arrives, and an append or cut in progress has finished. A
        thread left without partitions ends (after its current request).
        """
        replicas = list(replicas)
        keys = [TopicPartition(r.topic, r.partition) for r in replicas]
        with self._lock:
            removed = self._detach(keys)
        _barrier(removed + replicas)
        for replica in removed:
            _logger.info("replica_fetcher.removed", topic=replica.topic, partition=replica.partition,
                         fetch_offset=replica.log.end_offset)

    def describe(self) -> list[FollowerStatus]:
        """Every followed partition: leader, log end, high watermark, lag, last fetch (no order promised)."""
        with self._lock:
            threads = list(self._threads.values())
        return [status for thread in threads for status in thread.describe()]

    def close(self, timeout_s: float = 5.0) -> bool:
        """Stop every thread and wait up to ``timeout_s`` in all for them to end; idempotent.

        Every replica is removed first (with the barrier of :meth:`remove`), so no
        replica is touched after this returns, even by a thread still waiting for its
        last answer (at most ``socket_timeout_ms`` for a leader that stopped answering).

        Returns:
            True when every thread ended in time; False otherwise (logged as
            ``replica_fetcher.threads_still_running``; they are daemon threads).
        """
        with self._lock:
            self._closed = True
            threads = [*self._threads.values(), *self._ending]
            self._threads.clear()
            self._leaders.clear()
            self._ending = []
        removed = [replica for thread in threads for replica in thread.shutdown()]
        _barrier(removed)
        deadline = time.monotonic() + timeout_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        alive = [thread.name for thread in threads if thread.is_alive()]
        if alive:
            _logger.warning("replica_fetcher.threads_still_running", threads=alive, timeout_s=timeout_s)
        return not alive

    def _detach(self, keys: list[TopicPartition], keep: Address | None = None) -> list[Replica]:
        """Under ``_lock``: take ``keys`` off their threads (unless fetched from ``keep``); end emptied threads."""
        self._ending = [thread for thread in self._ending if thread.is_alive()]
        by_leader: dict[Address, list[TopicPartition]] = {}
        for key in keys:
            leader = self._leaders.get(key)
            if leader is not None and leader != keep:
                by_leader.setdefault(leader, []).append(key)
                del self._leaders[key]
        removed: list[Replica] = []
        for leader, leader_keys in by_leader.items():
            thread = self._threads[leader]
            removed += thread.remove_partitions(leader_keys)
            if not thread.partition_count:
                del self._threads[leader]
                thread.shutdown()
                self._ending.append(thread)
        return removed


def _barrier(replicas: Iterable[Replica]) -> None:
    """Wait until no fetcher is inside an append or cut of ``replicas`` (each is out of every fetcher's set)."""
    for replica in {id(r): r for r in replicas}.values():
        with replica.lock:
            pass
