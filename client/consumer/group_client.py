"""The consumer's group client: membership plus offsets (Kafka's ConsumerCoordinator).

:class:`GroupClient` is a :class:`~rill.client.consumer.membership.GroupMembership`
(register, heartbeat, rebalance, eviction, leave) that also does what a consumer
needs from its group: commits (synchronous, and asynchronous through
:mod:`~rill.client.consumer.async_commits`), auto-commit, committed offsets, rewinds,
and the ``on_assign``/``on_revoke`` callbacks around a rebalance.

A consumer with a manual assignment (``assign()``) is no member: it never registers,
and its commits are *standalone* (no member id, generation -1, as Kafka's standalone
consumers commit), which the coordinator accepts only while the group has no live
member. Its partitions start from the group's committed offsets
(:meth:`GroupClient.start_from_committed`, one FetchOffsets), else from
``auto.offset.reset``; auto-commit works for it too.

Auto-commit (``enable.auto.commit``) commits, every ``auto.commit.interval.ms``, from
inside poll() and before it takes new messages, the positions reached by the messages
returned by *earlier* poll() calls: a message is auto-committed only once the
application has called poll() again after receiving it. It also runs before a
rebalance (step 4 of the membership protocol) and in close().

Blocking calls, each bounded by ``request.timeout.ms``: CommitOffsets (``commit()`` is
synchronous by nature: it returns when the offsets are durable; it first waits for the
earlier ``commit_async()`` calls), FetchOffsets (``committed()``, the start of manual
partitions) and RewindConsumer. They are short (one round trip and at most one fsync
on the coordinator).

Not thread-safe: driven by the consumer's poll loop (the done-callbacks only wake it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import structlog

from rill.client.grpc_client import REFUSALS, error_name
from rill.client.consumer.async_commits import AsyncCommits, Identity
from rill.client.consumer.errors import CommitFailed, GroupCoordinatorError, RewindFailed
from rill.client.consumer.fetcher import Fetcher
from rill.client.consumer.membership import STABLE, GroupMembership
from rill.client.net.selector_loop import SelectorLoop
from rill.client.consumer.subscription import COMMITTED, SubscriptionState, TopicPartition
from rill.client.errors import AuthorizationFailed, ConnectionClosed, RillError
from rill.client.cluster_metadata import ClusterMetadata
from rill.v1 import coordinator_pb2 as pb

log = structlog.get_logger(__name__)

Callback = Callable[[list[TopicPartition]], None]

STANDALONE: Identity = ("", -1)
"""Who a manual assignment's commits are made as: nobody (Kafka's standalone consumer: no member id, generation -1)."""


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
        self.async_commits = AsyncCommits(self, network, clock)

    # ---------------------------------------------------------------- the loop, with a manual assignment

    def tick(self, now: float) -> None:
        """Membership work (GroupMembership.tick), answered asynchronous commits, and for a manual
        assignment its start from the committed offsets and its auto-commit.

        Raises: as GroupMembership.tick.
        """
        super().tick(now)
        self.async_commits.pump(may_block=True)
        if self.subscription.manual:
            self._start_manual(now)
            if self.auto_commit and now >= self._next_auto_commit:
                self.auto_commit_now(now)

    def next_deadline(self, now: float) -> float:
        deadline = super().next_deadline(now)
        if self.subscription.manual and self.auto_commit and self.subscription.uncommitted():
            deadline = min(deadline, self._next_auto_commit)
        return deadline

    def _start_manual(self, now: float) -> None:
        """start_from_committed() for the manual partitions waiting for it; a failure is logged and retried
        after ``retry.backoff.ms`` (the fetcher's per-partition backoff wakes the loop)."""
        sub, fetcher = self.subscription, self.fetcher
        waiting = [tp for tp in sub.needs_committed() if not fetcher.backing_off(tp, sub.assignment[tp].epoch, now)]
        if not waiting:
            return
        try:
            self.start_from_committed(waiting)
        except RillError as exc:
            log.warning("consumer.committed_lookup_failed", group=self.group, error=str(exc),
                        partitions=[f"{t}-{p}" for t, p in waiting])
            for tp in waiting:
                fetcher.back_off(tp, sub.assignment[tp].epoch, now + self.retry_backoff)
            if isinstance(exc, REFUSALS):  # the ACLs refuse it: the application must hear of it
                raise

    def start_from_committed(self, partitions: Sequence[TopicPartition]) -> None:
        """Position manually assigned ``partitions`` that wait for it at the group's committed offsets, or
        apply ``auto.offset.reset`` where none is committed (blocking: one FetchOffsets).

        Raises:
            GroupCoordinatorError, ConnectionClosed (RillError): the lookup failed; nothing changed.
        """
        sub = self.subscription
        for tp, offset in self.fetch_committed(partitions).items():
            state = sub.assignment.get(tp)
            if state is None or state.reset != COMMITTED or state.position is not None:
                continue  # seeked, reset or unassigned meanwhile
            if offset is None:
                sub.request_reset(tp, sub.default_reset)
            else:
                sub.seek(tp, offset)
                state.committed = offset
            log.info("consumer.position_from_committed", topic=tp.topic, partition=tp.partition, committed=offset,
                     group=self.group)

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
        """Commit the positions that changed since the last commit; failures are logged, not raised (a refusal
        by the ACLs is raised by the next poll(), not from here: close() calls this too)."""
        self._next_auto_commit = now + self.auto_commit_interval
        offsets = self.subscription.uncommitted()
        if not offsets:
            return
        try:
            self.commit(offsets)
        except (CommitFailed, ConnectionClosed, AuthorizationFailed) as exc:
            log.warning("consumer.auto_commit_failed", error=str(exc), **self._ctx())
            if isinstance(exc, REFUSALS):
                self._error = exc

    def current_identity(self) -> Identity | None:
        """Who this consumer's commits are made as now: STANDALONE with a manual assignment, this member's
        (id, generation) while it is stable, else None (between registrations)."""
        if self.subscription.manual:
            return STANDALONE
        if self.state != STABLE or not self.member_id:
            return None
        return self.member_id, self.generation

    def commit_identity(self, offsets: Iterable[TopicPartition]) -> Identity:
        """current_identity(), or CommitFailed (REBALANCE_IN_PROGRESS, for ``offsets``) when it is None."""
        identity = self.current_identity()
        if identity is None:
            raise CommitFailed(self.group, self.generation, pb.REBALANCE_IN_PROGRESS,
                               {tp: "REBALANCE_IN_PROGRESS" for tp in offsets})
        return identity

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` as this member, or standalone for a manual assignment (blocking, at most
        ``request.timeout.ms``, after the earlier ``commit_async()`` calls were answered).

        Raises:
            CommitFailed: the coordinator stored nothing (per-partition codes in the
                exception); or this consumer is not a member right now (rejoining).
            ConnectionClosed: the coordinator could not be reached.
            GroupAuthorizationFailed, TopicAuthorizationFailed: the ACLs refuse the commit.
        """
        self.async_commits.flush(self.clock() + self.request_timeout)
        if not offsets:
            return
        identity = self.commit_identity(offsets)
        coordinator = self.coordinator_lookup.get()
        entries = [(tp.topic, tp.partition, offset) for tp, offset in offsets.items()]
        try:
            response = coordinator.commit(self.group, entries, consumer_id=identity[0], generation=identity[1])
        except ConnectionClosed:
            self.coordinator_lookup.mark_unknown()
            raise
        failure = self.commit_result(offsets, identity, response)
        if failure is not None:
            raise failure

    def commit_result(self, offsets: Mapping[TopicPartition, int], identity: Identity,
                      response: pb.CommitOffsetsResponse) -> CommitFailed | None:
        """What a CommitOffsets answer means (None: stored); a member's refusal also starts what it calls for
        (an eviction, a rejoin), if the commit was made in the current membership."""
        code = response.error_code
        if code == pb.NONE:
            self.subscription.mark_committed(offsets)
            self.stats["commits"] += 1
            log.debug("consumer.committed", partitions=len(offsets), standalone=identity == STANDALONE, **self._ctx())
            return None
        codes = {TopicPartition(o.topic, o.partition): error_name(o.error_code) for o in response.offsets}
        failure = CommitFailed(self.group, identity[1], code, codes)
        log.warning("consumer.commit_failed", error=error_name(code), standalone=identity == STANDALONE,
                    **self._ctx())
        if identity != STANDALONE and identity == (self.member_id, self.generation):
            if code == pb.UNKNOWN_MEMBER:
                self._evict(self.clock(), "a commit was answered UNKNOWN_MEMBER: the coordinator removed this "
                                          "member (session expired or coordinator restarted)", code)
            elif code in (pb.ILLEGAL_GENERATION, pb.REBALANCE_IN_PROGRESS, pb.NOT_COORDINATOR, pb.GROUP_NOT_FOUND):
                self._rejoin_reason = self._rejoin_reason or f"a commit was answered {error_name(code)}"
        return failure

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
        if self.subscription.manual:  # no membership to re-register: move this consumer's own positions
            for tp in mine:
                self.subscription.seek(tp, moved[tp])
                self.subscription.assignment[tp].committed = moved[tp]
        if mine and self.state == STABLE:
            # The coordinator refuses this member's commits until it re-registers, so the
            # rewind cannot be undone by a commit: re-register, and do not try to commit.
            self._rejoin_reason = "partitions of this consumer were rewound"
            self._commit_before_rejoin = False
        return moved
