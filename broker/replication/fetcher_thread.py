"""One leader's replica fetcher: a thread copying every partition followed from it (Kafka's ReplicaFetcherThread).

The loop, while the thread has partitions:

1. Take the partitions that are not backing off (at most as many as one response can
   hold: :data:`DEFAULT_MAX_RESPONSE_SIZE` / ``max_bytes``, rotating so none starves)
   and, under each ``replica.lock``, make a healing replica's pending cut (heal_cut.py)
   and read where it stands: leader epoch, log end (the fetch offset: a follower's log
   is a byte prefix of its leader's) and latest epoch.
2. Send one REPLICA_FETCH on the thread's one :class:`BrokerConnection` to the leader
   and wait for the answer (the leader holds it up to ``max_wait_ms``).
3. For each block, under ``replica.lock``, and only if the replica is still this
   thread's, with the same leader epoch and log end as in step 1 (else the world moved
   and the block is dropped), apply it (fetch_block.py). Then the partition is fetched
   again at once, backs off for ``backoff_ms`` (less at first when the leader is not
ready yet: :data:`_LEADER_NOT_READY`), or is failed and fetched no more.

A connection that fails (refused, reset, timed out, an answer that does not decode)
is closed, and the next connect waits ``backoff_ms``: an unreachable leader costs one
attempt per back-off, never a spin. With every partition backing off the thread waits
on its condition until the earliest back-off ends or :meth:`add_partition`,
:meth:`remove_partitions` or :meth:`shutdown` wakes it.

Thread-safety: the methods other than :meth:`run` are called by
:class:`~rill.broker.replication.replica_fetcher.ReplicaFetchers` from any thread.
``_cond`` guards the set of partitions, their back-offs and failures, and the stop
flag; lock order is ``replica.lock`` then ``_cond``, and nothing holding ``_cond``
takes a replica's lock. The connection and the log rate limits belong to the thread.
``lag_bytes`` and ``last_fetch_ms`` are plain ints written by the thread and readable
from any thread (:meth:`describe`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

import structlog

from rill.broker.replication.fetch_block import BlockOutcome, apply_block
from rill.broker.replication.heal_cut import make_pending_cut
from rill.broker.replication.replica import Replica
from rill.broker.replication.replication_throttle import ReplicationThrottle
from rill.client.blocking_connection import DEFAULT_MAX_RESPONSE_SIZE, BrokerConnection
from rill.client.security.client_security import ClientSecurity
from rill.client.errors import ConnectionClosed, ErrorCode, error_for_code
from rill.client.protocol.framing import DecodeError
from rill.client.protocol.replica_fetch import (ReplicaFetchBlock, ReplicaFetchPartition, ReplicaFetchRequest,
                                                decode_replica_fetch_response, encode_replica_fetch)
from rill.client.structs import Address, TopicPartition

__all__ = ["FetcherSettings", "FollowerStatus", "ReplicaFetcherThread"]

_logger = structlog.get_logger(__name__)
_BLOCK_HEADER = 40  # bytes of a response block before its messages (replica_fetch.py)
_MAX_COUNT = 32_767  # partitions in one request: COUNT is an int16
_LOG_INTERVAL_S = 10.0  # a repeated failure is logged at most this often
FIRST_QUICK_RETRY_S = 0.02
"""The first retry after an answer that says the leader is not ready for this partition yet."""
_LEADER_NOT_READY = frozenset({ErrorCode.NOT_LEADER_FOR_PARTITION, ErrorCode.UNKNOWN_LEADER_EPOCH,
                               ErrorCode.UNKNOWN_TOPIC})
"""The controller tells a new leader and its followers at once, so a follower's first fetch can reach the
leader before its LeaderAndIsr has: it answers that it does not lead the partition (yet), in that epoch, or
has no replica of it. That passes within milliseconds, and acks=all produces wait for the follower
meanwhile: such an error is retried after FIRST_QUICK_RETRY_S, then twice as long each time, up to
``backoff_ms`` (a broker that really is no leader is asked once per back-off soon enough)."""


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    """How a follower fetches (Kafka's ``replica.fetch.*`` keys).

    Attributes:
        broker_id: this broker's id, sent as ``REPLICA_ID``.
        max_wait_ms: how long the leader may hold a request with too few bytes (replica.fetch.wait.max.ms).
        min_bytes: the bytes the leader waits for before answering (replica.fetch.min.bytes).
        max_bytes: the most bytes asked for per partition (replica.fetch.max.bytes).
        backoff_ms: the wait after a partition's error or a failed connection (replica.fetch.backoff.ms).
        socket_timeout_ms: the connect and each socket operation (replica.socket.timeout.ms);
            more than ``max_wait_ms``, or every long poll would time out.

    Raises (constructor):
        ValueError: a negative wait, back-off or minimum, ``max_bytes`` below 1, or a socket
            timeout not above ``max_wait_ms``.
    """

    broker_id: int
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 1024 * 1024
    backoff_ms: int = 1000
    socket_timeout_ms: int = 30_000

    def __post_init__(self) -> None:
        if min(self.max_wait_ms, self.min_bytes, self.backoff_ms) < 0 or self.max_bytes < 1:
            raise ValueError(f"replica fetch settings must not be negative (max_bytes at least 1): {self}")
        if self.socket_timeout_ms <= self.max_wait_ms:
            raise ValueError(f"replica.socket.timeout.ms ({self.socket_timeout_ms}) must exceed "
                             f"replica.fetch.wait.max.ms ({self.max_wait_ms})")


@dataclass(frozen=True, slots=True)
class FollowerStatus:
    """One followed partition as its fetcher sees it (for ``rill topics describe``).

    Attributes:
        lag_bytes: ``max(0, leader's high watermark - log end)`` at the last answer (0 before any).
        last_fetch_ms: wall-clock ms of the last answer without error, -1 before any.
        backing_off: waiting for a back-off (the partition's, or the connection's) to end.
        failed: why fetching stopped (the log failed), or None.
    """

    topic: str
    partition: int
    leader: Address
    leader_epoch: int
    log_end_offset: int
    high_watermark: int
    lag_bytes: int
    last_fetch_ms: int
    backing_off: bool
    failed: str | None


class _Fetch:
    """One partition a fetcher copies; replaced by a new one when it is added again."""

    __slots__ = ("replica", "logger", "backoff_until", "failed", "lag_bytes", "last_fetch_ms", "logged_error",
                 "quick_retries", "caught_up")

    def __init__(self, replica: Replica, logger: Any) -> None:
        self.replica = replica
        self.logger = logger
        self.backoff_until = 0.0  # time.monotonic(); under _cond
        self.failed: str | None = None  # under _cond
        self.lag_bytes = 0
        self.last_fetch_ms = -1
        self.logged_error: tuple[int, float] = (ErrorCode.NONE, 0.0)  # the last error code logged and when
        self.quick_retries = 0  # leader-not-ready answers in a row (_LEADER_NOT_READY); the thread's
        self.caught_up = False  # reached the leader's high watermark once: never throttled from then on


class _Position(NamedTuple):
    """Where a partition stood when its part of a request was built."""

    fetch: _Fetch
    leader_epoch: int
    fetch_offset: int
    last_epoch: int
    throttled: bool = False  # fetched under the replication throttle


def _key(replica: Replica) -> TopicPartition:
    return TopicPartition(replica.topic, replica.partition)


class ReplicaFetcherThread(threading.Thread):
    """Fetches the partitions it is given from ``leader`` until :meth:`shutdown` (module docstring).

    A daemon thread named ``rill-replica-fetcher-<label>``.
    """

    def __init__(self, leader: Address, settings: FetcherSettings, label: str,
                 throttle: ReplicationThrottle | None = None, security: ClientSecurity | None = None) -> None:
        super().__init__(name=f"rill-replica-fetcher-{label}", daemon=True)
        self.leader = leader
        self._security = security
        self._settings = settings
        self._throttle = throttle
        self._leader_name = f"{leader[0]}:{leader[1]}"
        self._logger = _logger.bind(leader=self._leader_name, fetcher=self.name)
        self._cond = threading.Condition()
        self._fetches: dict[TopicPartition, _Fetch] = {}
        self._stopping = False
        self._connection: BrokerConnection | None = None
        self._connect_after = 0.0  # time.monotonic(); under _cond
        self._connection_failures = 0
        self._failure_logged_at = -_LOG_INTERVAL_S
        room = (DEFAULT_MAX_RESPONSE_SIZE - 64) // (settings.max_bytes + _BLOCK_HEADER)
        self._max_partitions = max(1, min(_MAX_COUNT, room))

    # -- called by ReplicaFetchers, from any thread ----------------------------------------------

    def add_partition(self, replica: Replica) -> Replica | None:
        """Fetch ``replica`` from now on, at once; return the replica it replaces (same partition), or None."""
        logger = _logger.bind(topic=replica.topic, partition=replica.partition, leader=self._leader_name,
                              leader_id=replica.leader_id)
        with self._cond:
            old = self._fetches.pop(_key(replica), None)
            self._fetches[_key(replica)] = _Fetch(replica, logger)
            self._cond.notify()
        return old.replica if old is not None else None

    def remove_partitions(self, keys: list[TopicPartition]) -> list[Replica]:
        """Stop fetching ``keys`` (those not fetched here are ignored); return the replicas removed.

        A block already in flight for one of them is dropped when it arrives; one being
        applied right now finishes first (the caller waits on ``replica.lock`` for that).
        """
        with self._cond:
            removed = [fetch.replica for fetch in (self._fetches.pop(k, None) for k in keys) if fetch is not None]
            self._cond.notify()
        return removed

    def shutdown(self) -> list[Replica]:
        """Stop fetching everything and end the thread after its current request; return the replicas removed."""
        with self._cond:
            removed = [fetch.replica for fetch in self._fetches.values()]
            self._fetches.clear()
            self._stopping = True
            self._cond.notify()
        return removed

    @property
    def partition_count(self) -> int:
        with self._cond:
            return len(self._fetches)

    def describe(self) -> list[FollowerStatus]:
        """The partitions fetched here, in no particular order (reads plain attributes, takes no replica lock)."""
        now = time.monotonic()
        with self._cond:
            fetches = list(self._fetches.values())
            connecting = now < self._connect_after
        return [FollowerStatus(f.replica.topic, f.replica.partition, self.leader, f.replica.leader_epoch,
                               f.replica.log.end_offset, f.replica.high_watermark, f.lag_bytes, f.last_fetch_ms,
                               connecting or now < f.backoff_until, f.failed) for f in fetches]

    # -- the thread -----------------------------------------------------------------------------

    def run(self) -> None:
        self._logger.info("replica_fetcher.started")
        try:
            while (positions := self._next_request()) is not None:
                if positions:
                    self._fetch(positions)
        except BaseException:
            self._logger.exception("replica_fetcher.crashed")
            raise
        finally:
            self._disconnect()
            self._logger.info("replica_fetcher.stopped")

    def _next_request(self) -> list[_Position] | None:
        """The partitions to fetch now (waiting until there are some); None once stopping.

        Returns an empty list when every partition taken turned out to have a failed log.
        """
        with self._cond:
            while True:
                if self._stopping:
                    return None
                now = time.monotonic()
                ready, wake_at = self._ready(now)
                if ready:
                    break
                self._cond.wait(None if wake_at is None else max(0.0, wake_at - now))
        return [p for p in map(self._position, ready) if p is not None]

    def _ready(self, now: float) -> tuple[list[_Fetch], float | None]:
        """Under ``_cond``: the partitions due now, or none and when the next one is (None: wait to be woken)."""
        if now < self._connect_after:
            return [], self._connect_after
        ready: list[_Fetch] = []
        wake_at: float | None = None
        for fetch in self._fetches.values():
            if fetch.failed is not None:
                continue
            if fetch.backoff_until <= now and self._throttled(fetch):
                fetch.backoff_until = now + self._throttle_delay()
            if fetch.backoff_until <= now:
                ready.append(fetch)
            elif wake_at is None or fetch.backoff_until < wake_at:
                wake_at = fetch.backoff_until
        if len(ready) > self._max_partitions:
            ready = ready[:self._max_partitions]
            for fetch in ready:  # to the back of the line: the others go first next time
                self._fetches[_key(fetch.replica)] = self._fetches.pop(_key(fetch.replica))
        return ready, wake_at

    def _throttled(self, fetch: _Fetch) -> bool:
        """Whether ``fetch`` is under the replication throttle: a replica being added, not caught up yet."""
        throttle = self._throttle
        return throttle is not None and throttle.rate > 0 and fetch.replica.throttled and not fetch.caught_up

    def _throttle_delay(self) -> float:
        return self._throttle.delay_s() if self._throttle is not None else 0.0

    def _position(self, fetch: _Fetch) -> _Position | None:
        replica = fetch.replica
        with replica.lock:
            if replica.pending_cut is not None:
                make_pending_cut(replica, fetch.logger)  # a healing replica: cut before fetching (heal_cut.py)
            failure = replica.log.failed
            if failure is None:
                return _Position(fetch, replica.leader_epoch, replica.log.end_offset, replica.epochs.latest_epoch(),
                                 self._throttled(fetch))
        fetch.logger.error("replica.log_offline", error=str(failure), hint="fetching of this partition stops")
        self._settle(fetch, BlockOutcome.FAILED, f"log failed: {failure}")
        return None

    def _fetch(self, positions: list[_Position]) -> None:
        """One request for ``positions`` and its answer applied."""
        settings = self._settings
        throttled_size = self._throttle.fetch_size(settings.max_bytes) if self._throttle is not None else 0
        request = ReplicaFetchRequest(settings.broker_id, settings.max_wait_ms, settings.min_bytes, [
            ReplicaFetchPartition(p.fetch.replica.topic, p.fetch.replica.partition, p.leader_epoch, p.fetch_offset,
                                  p.last_epoch, throttled_size if p.throttled else settings.max_bytes)
            for p in positions])
        blocks = self._round_trip(encode_replica_fetch(request), positions)
        if blocks is None:
            return
        now_ms = int(time.time() * 1000)
        for position, block in zip(positions, blocks):
            self._apply(position, block, now_ms)

    def _round_trip(self, frame: bytes, positions: list[_Position]) -> list[ReplicaFetchBlock] | None:
        """Send ``frame`` and decode the answer: its blocks, one per position; None after a failure (handled)."""
        try:
            if self._connection is None:
                self._connection = BrokerConnection(*self.leader, timeout=self._settings.socket_timeout_ms / 1000,
                                                    security=self._security)
            error, blocks = decode_replica_fetch_response(self._connection.request(frame))
        except (ConnectionClosed, DecodeError) as exc:
            self._connection_failed(str(exc))
            return None
        if error or len(blocks) != len(positions):
            self._connection_failed(f"error code {error}" if error else
                                    f"{len(blocks)} blocks answered {len(positions)} partitions")
            return None
        self._connection_failures = 0
        return blocks

    def _connection_failed(self, reason: str) -> None:
        """Close the connection and connect again only after the back-off; log it, at most every 10 s."""
        self._disconnect()
        self._connection_failures += 1
        with self._cond:
            self._connect_after = time.monotonic() + self._settings.backoff_ms / 1000
        now = time.monotonic()
        if self._connection_failures == 1 or now - self._failure_logged_at >= _LOG_INTERVAL_S:
            self._failure_logged_at = now
            self._logger.warning("replica_fetcher.fetch_failed", error=reason, failures=self._connection_failures,
                                 backoff_ms=self._settings.backoff_ms)

    def _disconnect(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _apply(self, position: _Position, block: ReplicaFetchBlock, now_ms: int) -> None:
        """Apply one block under the replica's lock, if the replica is still where the request left it."""
        fetch = position.fetch
        replica = fetch.replica
        with replica.lock:
            if not self._current(position):
                fetch.logger.debug("replica.block_dropped", fetch_offset=position.fetch_offset)
                return
            try:
                outcome = apply_block(replica, block, position.fetch_offset, fetch.logger)
            except Exception:  # a bug: this partition stops, the others go on (Kafka's KIP-461)
                fetch.logger.exception("replica.apply_failed", fetch_offset=position.fetch_offset)
                outcome = BlockOutcome.FAILED
            if block.error == ErrorCode.NONE:
                fetch.last_fetch_ms = now_ms
                fetch.lag_bytes = max(0, block.high_watermark - replica.log.end_offset)
                if position.throttled:
                    self._throttled_block(fetch, len(block.messages))
        if outcome is BlockOutcome.BACK_OFF and block.error not in (ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE):
            self._log_error(fetch, block.error)
        self._settle(fetch, outcome, "log failed", block.error)

    def _throttled_block(self, fetch: _Fetch, nbytes: int) -> None:
        """Count a throttled replica's bytes; once it has caught up it is throttled no more (it joins the ISR)."""
        if self._throttle is not None:
            self._throttle.record(nbytes)
        if fetch.lag_bytes == 0 and not fetch.caught_up:
            fetch.caught_up = True
            fetch.logger.info("replica.caught_up", log_end=fetch.replica.log.end_offset,
                              throttled_bytes=self._throttle.throttled_bytes if self._throttle is not None else 0)

    def _current(self, position: _Position) -> bool:
        """Under ``replica.lock``: still fetched here, with the leader epoch and log end the request carried."""
        replica = position.fetch.replica
        with self._cond:
            if self._fetches.get(_key(replica)) is not position.fetch:
                return False
        return replica.leader_epoch == position.leader_epoch and replica.log.end_offset == position.fetch_offset

    def _settle(self, fetch: _Fetch, outcome: BlockOutcome, reason: str, error: int = ErrorCode.NONE) -> None:
        if outcome is BlockOutcome.FETCHED:
            fetch.quick_retries = 0
            return
        backoff_s = self._settings.backoff_ms / 1000
        if outcome is BlockOutcome.BACK_OFF and error in _LEADER_NOT_READY:
            backoff_s = min(backoff_s, FIRST_QUICK_RETRY_S * 2 ** min(fetch.quick_retries, 16))
            fetch.quick_retries += 1
        else:
            fetch.quick_retries = 0
        with self._cond:
            if outcome is BlockOutcome.FAILED:
                fetch.failed = reason
            else:
                fetch.backoff_until = time.monotonic() + backoff_s

    def _log_error(self, fetch: _Fetch, code: int) -> None:
        """Debug-log a partition's error code: a new code at once, the same one at most every 10 s."""
        now = time.monotonic()
        last_code, logged_at = fetch.logged_error
        if code != last_code or now - logged_at >= _LOG_INTERVAL_S:
            fetch.logged_error = (code, now)
            fetch.logger.debug("replica.fetch_error", error=type(error_for_code(code)).__name__, code=code,
                               backoff_ms=self._settings.backoff_ms)
