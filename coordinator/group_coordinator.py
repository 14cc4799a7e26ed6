"""GroupCoordinator: the server side of seed 003's group membership, offsets and rewinds.

Handlers take a request and return ``(response, records)``. The records are not
applied yet: the caller persists them durably (the offsets log), then calls
:meth:`GroupCoordinator.apply`, which replays them. :meth:`GroupCoordinator.replay`
is the only mutator of persisted state (groups, generation, assignment, offsets);
at start-up the offsets log is replayed through it, and
:meth:`GroupCoordinator.snapshot_records` gives the few records that rebuild the
current persisted state, for the log's compaction.

Membership is live-only (members, heartbeats, pending joins, group state): after a
restart every group is EMPTY and its members re-register (a heartbeat or register
with an old consumer id gets UNKNOWN_MEMBER; register again with an empty id).

The modules behind it: ``membership`` (registers, heartbeats, leaves, timeouts),
``rebalance`` (assignment and join responses), ``offsets`` (commit, fetch, rewind),
``management`` (create, delete, list), ``describe`` (admin snapshots), ``state``
(the state machine), ``assignors``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Sequence
from typing import Any

import structlog

from rill.client.structs import TopicPartition
from rill.coordinator import management, offsets
from rill.coordinator.topic_catalog import Catalog
from rill.client.clock import Clock, Timer, TimerHandle
from rill.coordinator.describe import GroupDescription, describe
from rill.coordinator.group_state import Group
from rill.coordinator.limits import Limits
from rill.coordinator.membership_protocol import Membership, TimerAction
from rill.coordinator.pending import PendingJoin
from rill.coordinator.rebalance_completion import join_error
from rill.coordinator.locks import GroupLocks
from rill.coordinator.group_checkpoint import GroupSnapshot, snapshot_of
from rill.coordinator.records import (
    GenerationStarted, GroupCreated, GroupDeleted, GroupReleased, OffsetsCommitted, OffsetsDeleted, Record,
)
from rill.coordinator.state import GroupState, transition
from rill.v1 import coordinator_pb2 as pb

_logger = structlog.get_logger(__name__)

Sink = Callable[[Sequence[Record]], None]


class _GuardedHandle:
    """A timer handle whose cancellation is checked under the coordinator's lock when it fires,
    so a callback already waiting for the lock when it was cancelled does nothing."""

    __slots__ = ("inner", "cancelled")

    def __init__(self) -> None:
        self.inner: TimerHandle | None = None
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        if self.inner is not None:
            self.inner.cancel()


class GroupCoordinator:
    """Coordinates consumer groups: see the module docstring.

    Thread-safety: called from gRPC worker threads and the timer thread. One
    re-entrant lock (:attr:`lock`) is held around every handler, every replay and
    every timer callback, so each sees and leaves a consistent state. A handler's
    records are applied later, by the caller: the caller must apply them before it
    runs the next handler *for the same group* (the servicer's per-group lock does
    that), or hold :attr:`lock` across handler, persist and apply. Timer callbacks
    compute their records under the lock and hand them to the sink (see
    :meth:`set_sink`) after releasing it, so no fsync happens under the lock.
    Replaying the same completed generation twice (a handler and the rebalance timer
    racing to complete one rebalance) applies it once.
    """

    def __init__(self, catalog: Catalog, clock: Clock, timer: Timer, broker: pb.Broker, *,
                 min_session_timeout_ms: int = 6_000, max_session_timeout_ms: int = 300_000,
                 max_group_size: int = 1_000) -> None:
        self.catalog = catalog
        self.clock = clock
        self.timer = timer
        self.broker = broker
        self.limits = Limits(min_session_timeout_ms, max_session_timeout_ms, max_group_size)
        self.lock = threading.RLock()
        self._groups: dict[str, Group] = {}
        self._loading = False  # replay() of records read back from the log (see replay)
        self.rebalances: dict[str, int] = {}
        """Rebalances completed while coordinated here, by group (rill_group_rebalances_total)."""
        self._sink: Sink = self.apply
        self.group_locks = GroupLocks()
        self._membership = Membership(catalog, clock, self._schedule, self.limits)
        self._replayers: dict[type, Callable[[Any], None]] = {
            GroupCreated: self._replay_created,
            GroupDeleted: self._replay_deleted,
            GenerationStarted: self._replay_generation,
            OffsetsCommitted: self._replay_offsets,
            OffsetsDeleted: self._replay_offsets_deleted,
            GroupReleased: self._replay_released,
        }

    def set_sink(self, sink: Sink | None) -> None:
        """Where records from timers go: ``sink(records)`` persists them durably, then applies
        them (calls :meth:`apply`); it raises if it cannot persist. None (the default):
        :meth:`apply` alone, nothing persisted (tests)."""
        self._sink = sink if sink is not None else self.apply

    # ------------------------------------------------------------------ groups

    def create_group(self, req: pb.CreateGroupRequest) -> tuple[pb.CreateGroupResponse, list[Record]]:
        with self.lock:
            return management.create(self._groups, req, self.limits, self.broker)

    def delete_group(self, req: pb.DeleteGroupRequest) -> tuple[pb.DeleteGroupResponse, list[Record]]:
        with self.lock:
            return management.delete(self._groups, req)

    def list_groups(self, req: pb.ListGroupsRequest) -> tuple[pb.ListGroupsResponse, list[Record]]:
        """Never has records."""
        with self.lock:
            return management.listing(self._groups, req, self.broker), []

    def describe(self, group: str) -> GroupDescription | None:
        """A detached snapshot of the group, or None when it does not exist."""
        with self.lock:
            found = self._groups.get(group)
            return describe(found) if found is not None else None

    def group_names(self) -> list[str]:
        with self.lock:
            return sorted(self._groups)

    def offsets_of_topics(self, topics: Collection[str]) -> dict[str, tuple[str, ...]]:
        """Group -> which of ``topics`` it has committed offsets for (the groups that have any)."""
        wanted = set(topics)
        with self.lock:
            found = {name: tuple(sorted({tp.topic for tp in group.offsets} & wanted))
                     for name, group in self._groups.items()}
        return {name: t for name, t in sorted(found.items()) if t}

    # ------------------------------------------------------------------ membership

    def register_consumer(self, req: pb.RegisterConsumerRequest) -> tuple[PendingJoin, list[Record]]:
        """Join (or re-join) a group. The PendingJoin completes when the rebalance does: at once
        for an error or a rewound member's re-register, when these records (or later ones) are
        applied otherwise."""
        with self.lock:
            group = self._groups.get(req.consumer_group)
            if group is None:
                error = join_error(req.consumer_group, req.client_id, req.consumer_id, pb.GROUP_NOT_FOUND)
                return PendingJoin.completed(error), []
            return self._membership.register(group, req)

    def heartbeat(self, req: pb.HeartbeatRequest) -> tuple[pb.HeartbeatResponse, list[Record]]:
        """Never has records. GROUP_NOT_FOUND / UNKNOWN_MEMBER / REBALANCE_IN_PROGRESS /
        ILLEGAL_GENERATION / NONE (with the current generation)."""
        with self.lock:
            group = self._groups.get(req.consumer_group)
            if group is None:
                return pb.HeartbeatResponse(error_code=pb.GROUP_NOT_FOUND), []
            return self._membership.heartbeat(group, req), []

    def leave_group(self, group: str, consumer_id: str) -> tuple[pb.ErrorCode, list[Record]]:
        """A member leaves cleanly: GROUP_NOT_FOUND / UNKNOWN_MEMBER / NONE, and the records
        that complete the others' rebalance when nothing is left to wait for."""
        with self.lock:
            found = self._groups.get(group)
            if found is None:
                return pb.GROUP_NOT_FOUND, []
            return self._membership.leave(found, consumer_id)

    def on_topics_changed(self) -> list[str]:
        """A topic was created or grew: rebalance every STABLE group a member of which subscribes
        to a topic with partitions its last assignment did not see. Returns those groups."""
        with self.lock:
            topics = self.catalog.topics()
            return [name for name, group in sorted(self._groups.items())
                    if self._membership.on_topics_changed(group, topics)]

    # ------------------------------------------------------------------ offsets

    def commit_offsets(self, req: pb.CommitOffsetsRequest) -> tuple[pb.CommitOffsetsResponse, list[Record]]:
        with self.lock:
            return offsets.commit(self._groups.get(req.consumer_group), req, self.catalog,
                                  lambda name: management.implicit_settings(name, self.limits))

    def fetch_offsets(self, req: pb.FetchOffsetsRequest) -> tuple[pb.FetchOffsetsResponse, list[Record]]:
        """Never has records."""
        with self.lock:
            return offsets.fetch(self._groups.get(req.consumer_group), req), []

    def rewind_consumer(self, req: pb.RewindConsumerRequest) -> tuple[pb.RewindConsumerResponse, list[Record]]:
        with self.lock:
            return offsets.rewind(self._groups.get(req.consumer_group), req, self.catalog)

    # ------------------------------------------------------------------ records

    def apply(self, records: Sequence[Record]) -> None:
        """Replay records that have been persisted, in order."""
        with self.lock:
            for record in records:
                self.replay(record)

    def export(self, group: str) -> GroupSnapshot | None:
        """The group's persisted state as a checkpoint keeps it; None when it does not exist."""
        with self.lock:
            found = self._groups.get(group)
            return None if found is None else snapshot_of(found.settings, found.generation, found.offsets)

    def replay(self, record: Record, *, loading: bool = False) -> None:
        """Apply one record: the only way persisted state changes (live and at start-up).

        ``loading``: the record is read back from the log (start-up, a partition of the
        groups topic taken over), not new: a group it creates is logged at debug, since the
        load logs one summary (a line per group would be 10,000 lines for 10,000 groups).

        Raises:
            TypeError: ``record`` is not a coordinator record.
        """
        replayer = self._replayers.get(type(record))
        if replayer is None:
            raise TypeError(f"not a coordinator record: {record!r}")
        with self.lock:
            self._loading = loading
            try:
                replayer(record)
            finally:
                self._loading = False

    def snapshot_records(self, holds: Callable[[str], bool] | None = None) -> list[Record]:
        """Records that rebuild the current persisted state from nothing: per group,
        GroupCreated, the latest GenerationStarted (if any) and one OffsetsCommitted (if any).
        ``holds``: only the groups it accepts (those of one shard)."""
        with self.lock:
            out: list[Record] = []
            for name, group in sorted(self._groups.items()):
                if holds is not None and not holds(name):
                    continue
                out.append(group.settings)
                if group.generation:
                    out.append(GenerationStarted(name, group.generation, dict(group.assignment)))
                if group.offsets:
                    out.append(OffsetsCommitted(name, tuple((t, p, o) for (t, p), o in sorted(group.offsets.items()))))
            return out

    def _replay_created(self, record: GroupCreated) -> None:
        group = self._groups.get(record.group)
        if group is None:
            self._groups[record.group] = Group(record.group, record)
            log = _logger.debug if self._loading else _logger.info
            log("group.created", group=record.group, ephemeral=record.ephemeral, strategy=record.strategy)
        else:
            group.settings = record

    def _replay_deleted(self, record: GroupDeleted) -> None:
        group = self._forget(record.group, pb.GROUP_NOT_FOUND)
        if group is not None:
            _logger.info("group.dead", group=group.name, generation=group.generation)

    def _replay_released(self, record: GroupReleased) -> None:
        group = self._forget(record.group, pb.NOT_COORDINATOR)
        if group is not None:
            _logger.info("group.released", group=group.name, generation=group.generation)

    def _forget(self, name: str, code: pb.ErrorCode) -> Group | None:
        """Remove a group; its waiting members get ``code``. None when it did not exist."""
        group = self._groups.pop(name, None)
        self.rebalances.pop(name, None)
        if group is None:
            return None
        group.cancel_timers()
        for member in group.members.values():
            if member.join is not None:
                member.join.complete(join_error(group.name, member.client_id, member.consumer_id, code))
        transition(group, GroupState.DEAD)
        return group

    def _replay_generation(self, record: GenerationStarted) -> None:
        group = self._groups.get(record.group)
        if group is None:
            _logger.warning("coordinator.record_for_unknown_group", group=record.group, record="GenerationStarted")
            return
        if record.generation <= group.generation:
            return  # already applied (a completion computed twice), or older than what we have
        group.generation, group.assignment = record.generation, dict(record.assignment)
        if not self._loading:  # a rebalance completed here (not one read back from the log)
            self.rebalances[group.name] = self.rebalances.get(group.name, 0) + 1
        self._membership.generation_applied(group, record)

    def _replay_offsets_deleted(self, record: OffsetsDeleted) -> None:
        group = self._groups.get(record.group)
        if group is None:
            return
        gone = [tp for tp in group.offsets if tp.topic in record.topics]
        for tp in gone:
            del group.offsets[tp]
        if gone:
            _logger.info("group.offsets_deleted", group=group.name, topics=list(record.topics), partitions=len(gone))

    def _replay_offsets(self, record: OffsetsCommitted) -> None:
        group = self._groups.get(record.group)
        if group is None:
            _logger.warning("coordinator.record_for_unknown_group", group=record.group, record="OffsetsCommitted")
            return
        for topic, partition, offset in record.offsets:
            group.offsets[TopicPartition(topic, partition)] = offset
        if record.rewind:
            _logger.info("group.offsets_rewound", group=group.name, partitions=len(record.offsets))
            self._membership.rewind_applied(group, [TopicPartition(t, p) for t, p, _ in record.offsets])

    # ------------------------------------------------------------------ timers

    def _schedule(self, group: Group, delay_s: float, action: TimerAction) -> TimerHandle:
        handle = _GuardedHandle()
        name = group.name

        def fire() -> None:
            with self.group_locks.hold(name):  # records reach the log in the order they are applied
                with self.lock:
                    if handle.cancelled or self._groups.get(name) is not group:
                        return
                    records = action(group)
                self._emit(name, records)

        handle.inner = self.timer.schedule(delay_s, fire)
        return handle

    def _emit(self, name: str, records: list[Record]) -> None:
        """Persist and apply records produced by a timer; on failure, tell the waiting members."""
        if not records:
            return
        try:
            self._sink(records)
        except Exception as exc:
            _logger.error("coordinator.persist_failed", group=name, error=str(exc))
            with self.lock:
                group = self._groups.get(name)
                if group is not None:
                    self._membership.persist_failed(group)
