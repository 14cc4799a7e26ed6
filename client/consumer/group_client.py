"""The consumer's group client: membership plus offsets (Kafka's ConsumerCoordinator).

:class:`GroupClient` is a :class:`~rill.client.consumer.membership.GroupMembership`
(register, heartbeat, rebalance, eviction, leave) that also does what a consumer
needs from its group: commits, auto-commit, committed offsets, rewinds, and the
``on_assign``/``on_revoke`` callbacks around a rebalance.

Auto-commit (``enable.auto.commit``) commits, every ``auto.commit.interval.ms``, from
inside poll() and before it takes new messages, the positions reached by the messages
returned by *earlier* poll() calls: a message is auto-committed only once the
application has called poll() again after receiving it. It also runs before a
rebalance (step 4 of the membership protocol) and in close().

Blocking calls, each bounded by ``request.timeout.ms``: CommitOffsets (``commit()`` is
synchronous by nature: it returns when the offsets are durable), FetchOffsets
(``committed()``) and RewindConsumer. They are short (one round trip and at most one
fsync on the coordinator).

Not thread-safe: driven by the consumer's poll loop (the done-callbacks only wake it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from rill.client.grpc_client import error_name
from rill.client.consumer.errors import CommitFailed, GroupCoordinatorError, RewindFailed
from rill.client.consumer.fetcher import Fetcher
from rill.client.consumer.membership import STABLE, GroupMembership
from rill.client.net.selector_loop import SelectorLoop
from rill.client.consumer.subscription import SubscriptionState, TopicPartition
from rill.client.errors import ConnectionClosed
from rill.client.cluster_metadata import ClusterMetadata
from rill.v1 import coordinator_pb2 as pb

log = structlog.get_logger(__name__)

Callback = Callable[[list[TopicPartition]], None]


class GroupClient(GroupMembership):
    """One consumer's membership of one group, with its commits and rewinds; see the module docstring."""

    def __init__(self, group: str, settings: Mapping[str, Any], subscription: SubscriptionState, fetcher: Fetcher,
                 metadata: ClusterMetadata, network: SelectorLoop, clock: Callable[[], float] = time.monotonic,
                 on_assign: Callback | None = None, on_revoke: Callback | None = None) -> None:
        super().__init__(group, settings, subscription, fetcher, metadata, network, clock)
        self.auto_commit: bool = settings["enable.auto.commit"]
        self.auto_commit_interval: float = settings["auto.commit.interval.ms"] / 1000.0
        self.on_assign = on_assign
        self.on_revoke = on_revoke
        self._commit_before_rejoin = True
        self._next_auto_commit: float = clock() + self.auto_commit_interval  # set again on joining

    # ---------------------------------------------------------------- the membership hooks

    def _on_stable_tick(self, now: float) -> None:
        if self.auto_commit and now >= self._next_auto_commit:
            self.auto_commit_now(now)

    def _stable_deadline(self) -> float:
        if self.auto_commit and self.subscription.uncommitted():
            return self._next_auto_commit
        return super()._stable_deadline()

    def _on_join_prepare(self, now: float, owned: list[TopicPartition]) -> None:
        commit, self._commit_before_rejoin = self._commit_before_rejoin, True
        if commit and self.auto_commit:
            self.auto_commit_now(now)
        if owned and self.on_revoke is not None:
            self.on_revoke(owned)

    def _on_join_complete(self, now: float, partitions: list[TopicPartition]) -> None:
        self._next_auto_commit = now + self.auto_commit_interval
        if self.on_assign is not None:
            self.on_assign(partitions)

    # ---------------------------------------------------------------- commits

    def auto_commit_now(self, now: float) -> None:
        """Commit the positions that changed since the last commit; failures are logged, not raised."""
        self._next_auto_commit = now + self.auto_commit_interval
        offsets = self.subscription.uncommitted()
        if not offsets:
            return
        try:
            self.commit(offsets)
        except (CommitFailed, ConnectionClosed) as exc:
            log.warning("consumer.auto_commit_failed", error=str(exc), **self._ctx())

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` as this member (blocking, at most ``request.timeout.ms``).

        Raises:
            CommitFailed: the coordinator stored nothing (per-partition codes in the
                exception); or this consumer is not a member right now (rejoining).
            ConnectionClosed: the coordinator could not be reached.
        """
        if not offsets:
            return
        if self.state != STABLE or not self.member_id:
            raise CommitFailed(self.group, self.generation, pb.REBALANCE_IN_PROGRESS,
                               {tp: "REBALANCE_IN_PROGRESS" for tp in offsets})
        coordinator = self.coordinator_lookup.get()
        entries = [(tp.topic, tp.partition, offset) for tp, offset in offsets.items()]
        try:
            response = coordinator.commit(self.group, entries, consumer_id=self.member_id, generation=self.generation)
        except ConnectionClosed:
            self.coordinator_lookup.mark_unknown()
            raise
        code = response.error_code
        if code != pb.NONE:
            codes = {TopicPartition(o.topic, o.partition): error_name(o.error_code) for o in response.offsets}
            failure = CommitFailed(self.group, self.generation, code, codes)
            log.warning("consumer.commit_failed", error=error_name(code), **self._ctx())
            if code == pb.UNKNOWN_MEMBER:
                self._evict(self.clock(), "a commit was answered UNKNOWN_MEMBER: the coordinator removed this "
                                          "member (session expired or coordinator restarted)", code)
            elif code in (pb.ILLEGAL_GENERATION, pb.REBALANCE_IN_PROGRESS, pb.NOT_COORDINATOR, pb.GROUP_NOT_FOUND):
                self._rejoin_reason = self._rejoin_reason or f"a commit was answered {error_name(code)}"
            raise failure
        self.subscription.mark_committed(offsets)
        self.stats["commits"] += 1
        log.debug("consumer.committed", partitions=len(entries), **self._ctx())

    def fetch_committed(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (None where none is committed); blocking.

        Raises:
            GroupCoordinatorError: the coordinator refused. ConnectionClosed: it could not be reached.
        """
        response = self.coordinator_lookup.get().fetch_offsets(self.group,
                                                               [(tp.topic, tp.partition) for tp in partitions])
        if response.error_code == pb.GROUP_NOT_FOUND:
            return {tp: None for tp in partitions}
        if response.error_code != pb.NONE:
            raise GroupCoordinatorError(f"FetchOffsets for group {self.group!r}: {error_name(response.error_code)}",
                                        response.error_code)
        found = {TopicPartition(o.topic, o.partition): o.offset for o in response.offsets}
        return {tp: (found[tp] if found.get(tp, -1) >= 0 else None) for tp in partitions}

    # ---------------------------------------------------------------- rewinds

    def rewind(self, entries: Sequence[tuple[str, int, int]], target: pb.RewindTarget = pb.OFFSET,
               timestamp_ms: int = 0) -> dict[TopicPartition, int]:
        """Seed 003's "Offset Rewind": stop fetching, RewindConsumer, then (if this consumer owns a
        rewound partition) re-register without committing, which the next poll() does.

        Returns:
            The offset each partition moved to.

        Raises:
            RewindFailed: nothing moved (codes per partition in the exception).
            ConnectionClosed: the coordinator could not be reached.
        """
        self.fetcher.discard()  # stop fetching; positions are kept, so nothing is lost if nothing moves
        coordinator = self.coordinator_lookup.get()
        try:
            response = coordinator.rewind(self.group, entries, target=target, timestamp_ms=timestamp_ms)
        except ConnectionClosed:
            self.coordinator_lookup.mark_unknown()
            raise
        codes = {TopicPartition(o.topic, o.partition): error_name(o.error_code) for o in response.actual_offsets}
        if response.error_code != pb.NONE:
            raise RewindFailed(self.group, response.error_code, codes)
        moved = {TopicPartition(o.topic, o.partition): o.offset for o in response.actual_offsets}
        mine = sorted(tp for tp in moved if tp in self.subscription.assignment)
        log.info("consumer.rewound", partitions=len(moved), owned_here=[f"{t}-{p}" for t, p in mine], **self._ctx())
        if mine and self.state == STABLE:
            # The coordinator refuses this member's commits until it re-registers, so the
            # rewind cannot be undone by a commit: re-register, and do not try to commit.
            self._rejoin_reason = "partitions of this consumer were rewound"
            self._commit_before_rejoin = False
        return moved
