"""Group membership: register, heartbeat, rebalance, eviction, leave (Kafka's AbstractCoordinator).

Seed 003's membership protocol, as docs/groups.md implements it:

1. Find the coordinator (:mod:`~rill.client.consumer.coordinator_lookup`): ``ListGroups([group])``
   to a random broker; a group that does not exist yet is created.
2. ``RegisterConsumer`` with the subscription (topics, static partitions) and, after
   the first time, the member id. A pattern that matches nothing yet registers with
   no topics (the member takes part in the group's generations, so the coordinator
   knows the topics that appear later are new), unless ListGroups lists topics for
   the group: no topics would then mean "the group's topics", so it waits for a match.
   It answers only when the group's rebalance completes, so it runs as a gRPC future:
   poll() checks it every turn and still returns by its timeout; the future's
   done-callback wakes the loop.
3. On the answer: own its partitions, starting from the offsets it carries (-1: apply
   ``auto.offset.reset``), and heartbeat every ``heartbeat.interval.ms`` (also a
   future: the fetches are never held up by it; the timer is
   :class:`~rill.client.consumer.heartbeat.Heartbeat`).
4. A heartbeat answered with an error code (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION,
   GROUP_NOT_FOUND, NOT_COORDINATOR), or a change of subscription: stop fetching
   (buffered messages are dropped, in-flight fetch results will be), auto-commit (when
   enabled), call ``on_revoke``, give up the partitions, and go to 1.
5. UNKNOWN_MEMBER (from a heartbeat or a commit), or no successful heartbeat for a
   whole session timeout (the coordinator has then certainly removed the member):
   **evicted**. The partitions are dropped without committing, the next poll() raises
   :class:`MemberEvicted` once, and registers again as a new member.

A call the broker refuses (its ACLs: GroupAuthorizationFailed, TopicAuthorizationFailed,
ClusterAuthorizationFailed; or the credentials: AuthenticationFailed) is raised by the
next poll() and tried again only after a longer backoff: asking again the same way fails
the same way until an operator changes the ACLs or the settings.

:class:`GroupMembership` does steps 1 to 5; what a consumer adds to them (auto-commit,
``on_assign``/``on_revoke``, commits and rewinds) is
:class:`~rill.client.consumer.group_client.GroupClient`, through the ``_on_*`` hooks at the
end of the class. The long call, RegisterConsumer, and the frequent one, Heartbeat,
never block; finding the coordinator and LeaveGroup do, each bounded by
``request.timeout.ms``.

Not thread-safe: driven by the consumer's poll loop (the done-callbacks only wake it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import grpc
import structlog

from rill.client.grpc_client import REFUSALS, AdminClient, call_error, error_name
from rill.client.consumer.coordinator_lookup import CoordinatorLookup
from rill.client.consumer.errors import GroupCoordinatorError, MemberEvicted
from rill.client.consumer.fetcher import Fetcher
from rill.client.consumer.heartbeat import Heartbeat
from rill.client.net.selector_loop import SelectorLoop
from rill.client.consumer.subscription import SubscriptionState, TopicPartition
from rill.client.errors import ConnectionClosed, RillError
from rill.client.cluster_metadata import ClusterMetadata
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


class GroupMembership:
    """One consumer's membership of one group; see the module docstring.

    ``state`` is UNJOINED, REGISTERING (a RegisterConsumer future is pending) or
    STABLE (owns the partitions of ``generation``, heartbeats).
    """

    def __init__(self, group: str, settings: Mapping[str, Any], subscription: SubscriptionState, fetcher: Fetcher,
                 metadata: ClusterMetadata, network: SelectorLoop, clock: Callable[[], float] = time.monotonic) -> None:
        self.group = group
        self.session_timeout_ms: int = settings["session.timeout.ms"]
        self.request_timeout: float = settings["request.timeout.ms"] / 1000.0
        self.retry_backoff: float = settings["retry.backoff.ms"] / 1000.0
        self.subscription = subscription
        self.fetcher = fetcher
        self.metadata = metadata
        self.network = network
        self.clock = clock
        self.heartbeat = Heartbeat(settings["heartbeat.interval.ms"] / 1000.0, self.session_timeout_ms / 1000.0,
                                   clock())
        self.state = UNJOINED
        self.member_id = ""
        self.generation = 0
        self.coordinator_lookup = CoordinatorLookup(
            group, metadata, client_id=settings["client.id"], session_timeout_ms=self.session_timeout_ms,
            strategy=settings["assignment.strategy"], request_timeout=self.request_timeout)
        self._register: grpc.Future | None = None
        self._heartbeat: grpc.Future | None = None
        self._rejoin_reason: str | None = None
        self._retry_at = 0.0
        self._evicted: MemberEvicted | None = None
        self._error: RillError | None = None  # raised by the next tick
        self.stats = {"rebalances": 0, "commits": 0, "heartbeats": 0, "evictions": 0}  # metrics(); commits: GroupClient

    @property
    def coordinator(self) -> AdminClient | None:
        """The coordinator's gRPC client, None while it is unknown (found again when next needed)."""
        return self.coordinator_lookup.current

    def _ctx(self) -> dict[str, Any]:
        return {"group": self.group, "member": self.member_id, "generation": self.generation}

    # ---------------------------------------------------------------- the loop

    def tick(self, now: float) -> None:
        """One turn of membership work; see the module docstring.

        Raises:
            MemberEvicted: once, after an eviction (the registration of a new member has begun).
            GroupCoordinatorError: the coordinator refused the registration (retried later).
            AuthorizationFailed, AuthenticationFailed: the broker refused a call of the group's (retried later).
        """
        if self.state == STABLE:
            self._check_heartbeat(now)
            if self._evicted is None and self.state == STABLE and self.heartbeat.session_expired(now):
                elapsed = now - self.heartbeat.last_ack
                self._evict(now, f"no successful heartbeat for {elapsed:.1f} s, longer than session.timeout.ms "
                                 f"({self.heartbeat.session_timeout * 1000:.0f} ms): poll() was not called often "
                                 "enough, or the coordinator could not be reached (a coordinator broker that "
                                 "died hands its groups to another)", pb.UNKNOWN_MEMBER)
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
                self._on_stable_tick(now)
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
            deadlines = [self.heartbeat.session_deadline(), self._stable_deadline()]
            if self._heartbeat is None:
                deadlines.append(self.heartbeat.next_due())
            if self._rejoin_reason is not None:
                deadlines.append(now)
            return min(deadlines)
        if self.state == UNJOINED and self.subscription.has_subscription():
            return self._retry_at
        return math.inf

    def end_membership(self, now: float) -> None:
        """Stop being a member now (commit, on_revoke, give up the partitions, LeaveGroup), as the rejoin
        that unsubscribe() asked for does at the next poll(): assign() replaces the subscription at once."""
        if self.state == STABLE:
            self._rejoin_reason = self._rejoin_reason or "a manual assignment replaces the subscription"
            self._prepare_rejoin(now)
        elif self.state == REGISTERING:
            self.leave()

    def request_rejoin(self, reason: str) -> None:
        """Re-register on the next poll (the subscription changed)."""
        if self.state != UNJOINED:
            self._rejoin_reason = self._rejoin_reason or reason
        else:
            self._retry_at = 0.0

    # ---------------------------------------------------------------- registering

    def _maybe_register(self, now: float) -> None:
        sub = self.subscription
        if self.state != UNJOINED or not sub.has_subscription() or now < self._retry_at:
            return
        lookup = self.coordinator_lookup
        try:
            coordinator = lookup.find()
        except RillError as exc:
            if isinstance(exc, (GroupCoordinatorError, *REFUSALS)):  # the application's to fix: raised
                self._retry_at = now + max(self.retry_backoff, USER_ERROR_BACKOFF)
                self._error = exc
            else:
                log.warning("consumer.coordinator_not_found", reason=str(exc), **self._ctx())
                self._retry_at = now + self.retry_backoff
            return
        topics = sorted(sub.subscribed_topics())
        static = sorted(sub.static)
        if not topics and not static and lookup.group_topics != ():
            # A pattern that matches nothing yet. To the coordinator no topics means "the group's
            # topics", and this group may have some of its own: wait until the pattern matches.
            log.info("consumer.pattern_waiting", pattern=sub.pattern.pattern if sub.pattern else None, **self._ctx())
            self._retry_at = math.inf  # request_rejoin() (the pattern matched) registers
            return
        deadline = max(lookup.group_session_timeout_ms, self.session_timeout_ms) / 1000.0 + self.request_timeout
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
            self._refused(now, exc)
            self.coordinator_lookup.mark_unknown()
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
                self.coordinator_lookup.mark_unknown()

    def _refused(self, now: float, exc: grpc.RpcError) -> None:
        """A failed call that the broker refused (ACLs, credentials): raised by tick, tried again later."""
        error = call_error(exc, self.coordinator.address if self.coordinator is not None else "the coordinator")
        if isinstance(error, REFUSALS):
            self._error = error
            self._retry_at = now + max(self.retry_backoff, USER_ERROR_BACKOFF)

    def _joined(self, now: float, response: pb.RegisterConsumerResponse) -> None:
        self.member_id = response.consumer_id
        self.generation = response.generation
        session_ms = response.session_timeout or self.session_timeout_ms
        self.heartbeat.reset(now, session_ms / 1000.0)
        offsets = {TopicPartition(p.topic, p.partition): p.offset for p in response.partitions_to_own}
        self.subscription.assign(offsets)
        self.state = STABLE
        self.stats["rebalances"] += 1
        log.info("consumer.joined", partitions=[f"{tp.topic}-{tp.partition}@{o}" for tp, o in sorted(offsets.items())],
                 **self._ctx())
        self._on_join_complete(now, sorted(offsets))

    def _prepare_rejoin(self, now: float) -> None:
        """Step 4 of the module docstring: stop fetching, commit, give the partitions up."""
        reason, self._rejoin_reason = self._rejoin_reason, None
        log.info("consumer.rejoining", reason=reason, **self._ctx())
        self.fetcher.discard()
        owned = sorted(self.subscription.assignment)
        try:
            self._on_join_prepare(now, owned)
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
            coordinator = self.coordinator_lookup.get()
        except RillError as exc:
            log.warning("consumer.coordinator_not_found", reason=str(exc), **self._ctx())
            self.heartbeat.sent(now)  # try again after an interval
            if isinstance(exc, REFUSALS):
                self._error = exc
            return
        timeout = min(self.request_timeout, max(self.heartbeat.interval, self.heartbeat.session_timeout / 3))
        self._heartbeat = coordinator.heartbeat_future(self.group, self.member_id, self.generation, timeout=timeout)
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
            self._refused(now, exc)
            self.coordinator_lookup.mark_unknown()  # find it again before the next heartbeat
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
            self.coordinator_lookup.mark_unknown()
        self._rejoin_reason = self._rejoin_reason or f"heartbeat answered {error_name(code)}"

    def _cancel_heartbeat(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None

    # ---------------------------------------------------------------- leaving

    def leave(self) -> None:
        """LeaveGroup (blocking; failures are logged): the others rebalance at once."""
        if self._register is not None:
            self._register.cancel()
            self._register = None
        self._cancel_heartbeat()
        coordinator = self.coordinator
        if self.member_id and coordinator is not None:
            try:
                code = coordinator.leave_group(self.group, self.member_id).error_code
                log.info("consumer.left", result=error_name(code), **self._ctx())
            except ConnectionClosed as exc:
                log.warning("consumer.leave_failed", reason=str(exc), **self._ctx())
        self.member_id = ""
        self.state = UNJOINED

    def close(self) -> None:
        """Close the gRPC channels (call leave() first to leave the group)."""
        self.coordinator_lookup.close()

    # ---------------------------------------------------------------- hooks (GroupClient's part of the protocol)

    def _on_stable_tick(self, now: float) -> None:
        """tick() while stable and not rejoining, after the heartbeat was sent if due."""

    def _stable_deadline(self) -> float:
        """When the loop must wake for the subclass's own work while stable (inf: never)."""
        return math.inf

    def _on_join_prepare(self, now: float, owned: list[TopicPartition]) -> None:
        """A rejoin is about to give up ``owned`` (not called on an eviction); fetching has stopped."""

    def _on_join_complete(self, now: float, partitions: list[TopicPartition]) -> None:
        """A registration made this member STABLE, owning ``partitions`` (sorted)."""


def _rpc_reason(exc: grpc.RpcError) -> str:
    code = exc.code() if hasattr(exc, "code") else None
    detail = exc.details() if hasattr(exc, "details") else str(exc)
    return f"{code.name if code is not None else 'error'}: {detail}"
