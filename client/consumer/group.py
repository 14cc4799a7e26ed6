"""The group coordinator client: find the coordinator, register, heartbeat, commit, rewind, leave.

Seed 003's membership protocol, as docs/groups.md implements it:

1. Find the coordinator: ``ListGroups([group])`` to a random broker (its gRPC port comes
   from METADATA); a group that does not exist yet is created (``CreateGroup`` with
   this consumer's session timeout and ``assignment.strategy``).
2. ``RegisterConsumer`` with the subscription (topics, static partitions) and, after
   the first time, the member id. It answers only when the group's rebalance
   completes, so it runs as a gRPC future: poll() checks it every turn and still
   returns by its timeout; the future's done-callback wakes the loop.
3. On the answer: own its partitions, starting from the offsets it carries (-1: apply
   ``auto.offset.reset``), and heartbeat every ``heartbeat.interval.ms`` (also a
   future: the fetches are never held up by it).
4. A heartbeat answered with an error code (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION,
   GROUP_NOT_FOUND, NOT_COORDINATOR), or a change of subscription: stop fetching
   (buffered messages are dropped, in-flight fetch results will be), auto-commit (when
   enabled), call ``on_revoke``, give up the partitions, and go to 1.
5. UNKNOWN_MEMBER (from a heartbeat or a commit), or no successful heartbeat for a
   whole session timeout (the coordinator has then certainly removed the member):
   **evicted**. The partitions are dropped without committing, the next poll() raises
   :class:`MemberEvicted` once, and registers again as a new member.

Blocking calls, each bounded by ``request.timeout.ms``: ListGroups/CreateGroup (once
per registration), CommitOffsets (``commit()`` is synchronous by nature: it returns
when the offsets are durable), FetchOffsets (``committed()``), RewindConsumer and
LeaveGroup. They are short (one round trip and at most one fsync on the coordinator);
the long one, RegisterConsumer, and the frequent one, Heartbeat, never block.

Auto-commit (``enable.auto.commit``) commits, every ``auto.commit.interval.ms``, from
inside poll() and before it takes new messages, the positions reached by the messages
returned by *earlier* poll() calls: a message is auto-committed only once the
application has called poll() again after receiving it. It also runs before a
rebalance (step 4) and in close().

Not thread-safe: driven by the consumer's poll loop (the done-callbacks only wake it).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grpc
import structlog

from rill.client.admin import AdminClient, error_name
from rill.client.consumer.errors import CommitFailed, GroupCoordinatorError, MemberEvicted, RewindFailed
from rill.client.consumer.fetcher import Fetcher
from rill.client.consumer.network import Network
from rill.client.consumer.subscription import SubscriptionState, TopicPartition
from rill.client.errors import ConnectionClosed, RillError
from rill.client.metadata import ClusterMetadata
from rill.v1 import coordinator_pb2 as pb

log = structlog.get_logger(__name__)

UNJOINED = "unjoined"
REGISTERING = "registering"
STABLE = "stable"

# Register answers after which registering again at once (not after a backoff) is right.
_REJOIN_AT_ONCE = frozenset({pb.UNKNOWN_MEMBER, pb.REBALANCE_TIMEOUT})
# Register answers that are the user's problem (raised from poll), retried after a longer backoff.
_USER_ERRORS = frozenset({pb.INVALID_SESSION_TIMEOUT, pb.INVALID_TOPIC, pb.UNKNOWN_TOPIC_OR_PARTITION,
                          pb.PARTITION_ALREADY_CLAIMED, pb.INVALID_REQUEST, pb.INVALID_GROUP_NAME,
                          pb.INVALID_ASSIGNMENT_STRATEGY})
USER_ERROR_BACKOFF = 1.0

Callback = Callable[[list[TopicPartition]], None]


class Heartbeat:
    """When the next heartbeat is due and whether the session has surely expired (seconds, monotonic).

    ``last_ack`` is when the last successful heartbeat (or the register answer) was
    *received*: the coordinator saw it no later than that, so ``now > last_ack +
    session_timeout`` means its session timer has fired.
    """

    def __init__(self, interval: float, session_timeout: float, now: float) -> None:
        self.interval = interval
        self.session_timeout = session_timeout
        self.last_send = now
        self.last_ack = now

    def reset(self, now: float, session_timeout: float | None = None) -> None:
        """A registration completed (it counts as a heartbeat)."""
        if session_timeout is not None:
            self.session_timeout = session_timeout
        self.last_send = self.last_ack = now

    def sent(self, now: float) -> None:
        self.last_send = now

    def received(self, now: float) -> None:
        self.last_ack = now

    def due(self, now: float) -> bool:
        return now >= self.last_send + self.interval

    def next_due(self) -> float:
        return self.last_send + self.interval

    def session_deadline(self) -> float:
        return self.last_ack + self.session_timeout

    def session_expired(self, now: float) -> bool:
        return now > self.session_deadline()


class GroupClient:
    """One consumer's membership of one group; see the module docstring."""

    def __init__(self, group: str, settings: Mapping[str, Any], subscription: SubscriptionState, fetcher: Fetcher,
                 metadata: ClusterMetadata, network: Network, clock: Callable[[], float] = time.monotonic,
                 on_assign: Callback | None = None, on_revoke: Callback | None = None) -> None:
        self.group = group
        self.client_id: str = settings["client.id"]
        self.session_timeout_ms: int = settings["session.timeout.ms"]
        self.strategy: str = settings["assignment.strategy"]
        self.request_timeout: float = settings["request.timeout.ms"] / 1000.0
        self.retry_backoff: float = settings["retry.backoff.ms"] / 1000.0
        self.auto_commit: bool = settings["enable.auto.commit"]
        self.auto_commit_interval: float = settings["auto.commit.interval.ms"] / 1000.0
        self.subscription = subscription
        self.fetcher = fetcher
        self.metadata = metadata
        self.network = network
        self.clock = clock
        self.on_assign = on_assign
        self.on_revoke = on_revoke
        now = clock()
        self.heartbeat = Heartbeat(settings["heartbeat.interval.ms"] / 1000.0, self.session_timeout_ms / 1000.0, now)
        self.state = UNJOINED
        self.member_id = ""
        self.generation = 0
        self.group_session_timeout_ms = self.session_timeout_ms
        self.coordinator: AdminClient | None = None
        self._admins: dict[str, AdminClient] = {}
        self._register: grpc.Future | None = None
        self._heartbeat: grpc.Future | None = None
        self._rejoin_reason: str | None = None
        self._commit_before_rejoin = True
        self._retry_at = 0.0
        self._next_auto_commit = now + self.auto_commit_interval
        self._evicted: MemberEvicted | None = None
        self._error: GroupCoordinatorError | None = None
        self.stats = {"rebalances": 0, "commits": 0, "heartbeats": 0, "evictions": 0}

    def _ctx(self) -> dict[str, Any]:
        return {"group": self.group, "member": self.member_id, "generation": self.generation}

    # ---------------------------------------------------------------- the loop

    def tick(self, now: float) -> None:
        """One turn of membership work; see the module docstring.

        Raises:
            MemberEvicted: once, after an eviction (the registration of a new member has begun).
            GroupCoordinatorError: the coordinator refused the registration (retried later).
        """
        if self.state == STABLE:
            self._check_heartbeat(now)
            if self._evicted is None and self.state == STABLE and self.heartbeat.session_expired(now):
                elapsed = now - self.heartbeat.last_ack
                self._evict(now, f"no successful heartbeat for {elapsed:.1f} s, longer than session.timeout.ms "
                                 f"({self.heartbeat.session_timeout * 1000:.0f} ms): poll() was not called often "
                                 "enough", pb.UNKNOWN_MEMBER)
        if self._evicted is not None:
            evicted, self._evicted = self._evicted, None
            self._maybe_register(now)
            raise evicted
        if self.state == STABLE:
            if self._rejoin_reason is not None:
                self._prepare_rejoin(now)
            else:
                if self._heartbeat is None and self.heartbeat.due(now):
                    self._send_heartbeat(now)
                if self.auto_commit and now >= self._next_auto_commit:
                    self.auto_commit_now(now)
        if self.state == REGISTERING and self._register is not None and self._register.done():
            self._on_registered(now)
        if self.state == UNJOINED:
            self._maybe_register(now)
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def next_deadline(self, now: float) -> float:
        """When the loop must next wake for membership work (inf: nothing scheduled)."""
        if self.state == STABLE:
            deadlines = [self.heartbeat.session_deadline()]
            if self._heartbeat is None:
                deadlines.append(self.heartbeat.next_due())
            if self.auto_commit and self.subscription.uncommitted():
                deadlines.append(self._next_auto_commit)
            if self._rejoin_reason is not None:
                deadlines.append(now)
            return min(deadlines)
        if self.state == UNJOINED and self.subscription.has_subscription():
            return self._retry_at
        return math.inf

    def request_rejoin(self, reason: str) -> None:
        """Re-register on the next poll (the subscription changed)."""
        if self.state != UNJOINED:
            self._rejoin_reason = self._rejoin_reason or reason
        else:
            self._retry_at = 0.0

    # ---------------------------------------------------------------- finding the coordinator

    def _admin(self, address: str) -> AdminClient:
        admin = self._admins.get(address)
        if admin is None:
            admin = self._admins[address] = AdminClient(address, timeout=self.request_timeout,
                                                        client_id=self.client_id)
        return admin

    def find_coordinator(self) -> AdminClient:
        """ListGroups([group]) to a random broker; creates the group when it does not exist (blocking).

        Raises:
            ConnectionClosed: no broker or coordinator answered.
            GroupCoordinatorError: the group cannot be created (bad name, session timeout ...).
        """
        if not self.metadata.brokers:
            self.metadata.refresh()
        brokers = list(self.metadata.brokers.values())
        if not brokers:
            raise ConnectionClosed("metadata names no broker")
        broker = random.choice(brokers)
        admin = self._admin(f"{broker.host}:{broker.grpc_port}")
        listing = admin.list_groups([self.group])
        info = listing.groups_info[0] if listing.groups_info else None
        if info is None or info.error_code == pb.GROUP_NOT_FOUND:
            created = admin.create_group(self.group, [], session_timeout_ms=self.session_timeout_ms,
                                         strategy=self.strategy)
            if created.error_code not in (pb.NONE, pb.GROUP_ALREADY_EXISTS):
                raise GroupCoordinatorError(f"cannot create group {self.group!r}: {error_name(created.error_code)}",
                                            created.error_code)
            if created.error_code == pb.NONE:
                log.info("consumer.group_created", group=self.group, strategy=self.strategy,
                         session_timeout_ms=self.session_timeout_ms)
            controller = created.coordinator
        elif info.error_code != pb.NONE:
            raise GroupCoordinatorError(f"ListGroups for {self.group!r}: {error_name(info.error_code)}",
                                        info.error_code)
        else:
            controller = info.controller_broker
            self.group_session_timeout_ms = int(info.session_timeout) or self.session_timeout_ms
        self.coordinator = self._admin(f"{controller.host}:{controller.grpc_port}")
        return self.coordinator

    def _coordinator(self) -> AdminClient:
        return self.coordinator if self.coordinator is not None else self.find_coordinator()

    # ---------------------------------------------------------------- registering

    def _maybe_register(self, now: float) -> None:
        sub = self.subscription
        if self.state != UNJOINED or not sub.has_subscription() or now < self._retry_at:
            return
        try:
            coordinator = self.find_coordinator()
        except GroupCoordinatorError as exc:
            self._retry_at = now + max(self.retry_backoff, USER_ERROR_BACKOFF)
            self._error = exc
            return
        except RillError as exc:
            log.warning("consumer.coordinator_not_found", reason=str(exc), **self._ctx())
            self._retry_at = now + self.retry_backoff
            return
        topics = sorted(sub.subscribed_topics())
        static = sorted(sub.static)
        deadline = max(self.group_session_timeout_ms, self.session_timeout_ms) / 1000.0 + self.request_timeout
        future = coordinator.register_consumer_future(self.group, self.member_id, topics, static,
                                                      self.session_timeout_ms, timeout=deadline)
        self._register = future
        self.state = REGISTERING
        log.info("consumer.registering", coordinator=coordinator.address, topics=topics,
                 static_partitions=[f"{t}-{p}" for t, p in static], **self._ctx())
        future.add_done_callback(self.network.wake)

    def _on_registered(self, now: float) -> None:
        future, self._register = self._register, None
        assert future is not None
        self.state = UNJOINED
        self._retry_at = now + self.retry_backoff
        try:
            response = future.result()
        except grpc.RpcError as exc:
            log.warning("consumer.register_failed", reason=_rpc_reason(exc), **self._ctx())
            self.coordinator = None
            return
        except grpc.FutureCancelledError:
            return
        code = response.error_code
        if code == pb.NONE:
            self._joined(now, response)
        elif code in _REJOIN_AT_ONCE:
            log.info("consumer.register_again", error=error_name(code), **self._ctx())
            self.member_id = ""
            self._retry_at = now
        elif code in _USER_ERRORS:
            self._retry_at = now + max(self.retry_backoff, USER_ERROR_BACKOFF)
            self._error = GroupCoordinatorError(
                f"group {self.group!r} refused this consumer's registration: {error_name(code)} (topics "
                f"{sorted(self.subscription.subscribed_topics())}, static partitions "
                f"{sorted(self.subscription.static)}); retrying in {self._retry_at - now:.1f} s", code)
        else:
            log.info("consumer.register_retry", error=error_name(code), **self._ctx())
            if code in (pb.GROUP_NOT_FOUND, pb.NOT_COORDINATOR):
                self.coordinator = None

    def _joined(self, now: float, response: pb.RegisterConsumerResponse) -> None:
        self.member_id = response.consumer_id
        self.generation = response.generation
        session_ms = response.session_timeout or self.session_timeout_ms
        self.heartbeat.reset(now, session_ms / 1000.0)
        offsets = {TopicPartition(p.topic, p.partition): p.offset for p in response.partitions_to_own}
        self.subscription.assign(offsets)
        self.state = STABLE
        self.stats["rebalances"] += 1
        self._next_auto_commit = now + self.auto_commit_interval
        log.info("consumer.joined", partitions=[f"{tp.topic}-{tp.partition}@{o}" for tp, o in sorted(offsets.items())],
                 **self._ctx())
        if self.on_assign is not None:
            self.on_assign(sorted(offsets))

    def _prepare_rejoin(self, now: float) -> None:
        """Step 4 of the module docstring: stop fetching, commit, give the partitions up."""
        reason, self._rejoin_reason = self._rejoin_reason, None
        commit, self._commit_before_rejoin = self._commit_before_rejoin, True
        log.info("consumer.rejoining", reason=reason, **self._ctx())
        self.fetcher.discard()
        owned = sorted(self.subscription.assignment)
        try:
            if commit and self.auto_commit:
                self.auto_commit_now(now)
            if owned and self.on_revoke is not None:
                self.on_revoke(owned)
        finally:
            self.subscription.revoke_all()
            self._cancel_heartbeat()
            self.state = UNJOINED
            self._retry_at = now
            if not self.subscription.has_subscription():
                self.leave()
        self._maybe_register(now)

    def _evict(self, now: float, reason: str, code: int) -> None:
        owned = sorted(self.subscription.assignment)
        self.fetcher.discard()
        self.subscription.revoke_all()
        self._cancel_heartbeat()
        self._evicted = MemberEvicted(self.group, self.member_id, self.generation, owned, reason, code)
        log.warning("consumer.evicted", reason=reason, partitions=[f"{t}-{p}" for t, p in owned], **self._ctx())
        self.stats["evictions"] += 1
        self.member_id = ""
        self.state = UNJOINED
        self._rejoin_reason = None
        self._retry_at = now

    # ---------------------------------------------------------------- heartbeats

    def _send_heartbeat(self, now: float) -> None:
        try:
            coordinator = self._coordinator()
        except RillError as exc:
            log.warning("consumer.coordinator_not_found", reason=str(exc), **self._ctx())
            self.heartbeat.sent(now)  # try again after an interval
            return
        timeout = min(self.request_timeout, max(self.heartbeat.interval, self.heartbeat.session_timeout / 3))
        self._heartbeat = coordinator.heartbeat_future(self.group, self.member_id, self.generation,
                                                       self.session_timeout_ms, timeout=timeout)
        self.heartbeat.sent(now)
        self._heartbeat.add_done_callback(self.network.wake)

    def _check_heartbeat(self, now: float) -> None:
        future = self._heartbeat
        if future is None or not future.done():
            return
        self._heartbeat = None
        try:
            response = future.result()
        except grpc.RpcError as exc:
            log.warning("consumer.heartbeat_failed", reason=_rpc_reason(exc), **self._ctx())
            self.coordinator = None  # find it again before the next heartbeat
            return
        except grpc.FutureCancelledError:
            return
        self.stats["heartbeats"] += 1
        code = response.error_code
        if code in (pb.NONE, pb.REBALANCE_IN_PROGRESS):
            self.heartbeat.received(now)
        if code == pb.NONE:
            return
        if code == pb.UNKNOWN_MEMBER:
            self._evict(now, "the coordinator no longer knows this member (UNKNOWN_MEMBER): its session expired, "
                             "it missed a rebalance, or the coordinator restarted", code)
            return
        if code == pb.NOT_COORDINATOR:
            self.coordinator = None
        self._rejoin_reason = self._rejoin_reason or f"heartbeat answered {error_name(code)}"

    def _cancel_heartbeat(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None

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
        coordinator = self._coordinator()
        entries = [(tp.topic, tp.partition, offset) for tp, offset in offsets.items()]
        try:
            response = coordinator.commit(self.group, entries, consumer_id=self.member_id, generation=self.generation)
        except ConnectionClosed:
            self.coordinator = None
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
        response = self._coordinator().fetch_offsets(self.group, [(tp.topic, tp.partition) for tp in partitions])
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
        coordinator = self._coordinator()
        try:
            response = coordinator.rewind(self.group, entries, target=target, timestamp_ms=timestamp_ms)
        except ConnectionClosed:
            self.coordinator = None
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

    # ---------------------------------------------------------------- leaving

    def leave(self) -> None:
        """LeaveGroup (blocking; failures are logged): the others rebalance at once."""
        if self._register is not None:
            self._register.cancel()
            self._register = None
        self._cancel_heartbeat()
        if self.member_id and self.coordinator is not None:
            try:
                code = self.coordinator.leave_group(self.group, self.member_id).error_code
                log.info("consumer.left", result=error_name(code), **self._ctx())
            except ConnectionClosed as exc:
                log.warning("consumer.leave_failed", reason=str(exc), **self._ctx())
        self.member_id = ""
        self.state = UNJOINED

    def close(self) -> None:
        """Close the gRPC channels (call leave() first to leave the group)."""
        for admin in self._admins.values():
            admin.close()
        self._admins.clear()
        self.coordinator = None


def _rpc_reason(exc: grpc.RpcError) -> str:
    code = exc.code() if hasattr(exc, "code") else None
    detail = exc.details() if hasattr(exc, "details") else str(exc)
    return f"{code.name if code is not None else 'error'}: {detail}"
