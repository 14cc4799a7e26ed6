"""Groups in a cluster: which broker coordinates each group, checkpoints, and takeovers.

With ``zookeeper.connect`` set, :class:`GroupPlacement` is the coordinator's
:class:`~rill.coordinator.routing.Router`. From the live rill brokers in the registry
(those that publish a gRPC port) it places every group on one broker by rendezvous
hashing (rill.coordinator.placement); the group RPCs for groups placed elsewhere
answer NOT_COORDINATOR.

One worker thread does all ZooKeeper work:

- **Checkpoints**: every ``offsets.checkpoint.interval.ms`` it writes the groups
  that changed since the last round (:meth:`GroupCoordinator.take_changed`) to
  ``/rill/groups/[group]`` (rill.broker.cluster.checkpoint_store), in as few ZooKeeper
  transactions as their size allows: at most one write per changed group per interval,
  however many commits it had. A deleted group leaves a tombstone.
- **Placement changes** (a registry snapshot with another set of live brokers):
  first every group now placed elsewhere is *released*: under its group lock (so no
  call is half done), its final state is written with ``released: true`` (when this
  broker is still its checkpoint's writer) and it is dropped locally (a GroupReleased
  record; its members get NOT_COORDINATOR). Then every group newly placed here is
  *taken over*: when its checkpoint's writer is another live broker that has not
  released it, this waits (up to ``zookeeper.session.timeout.ms``) for the release;
  then :func:`rill.coordinator.group_checkpoint.decide` chooses between local state and
  checkpoint, the result is persisted locally, and a claim (this broker as writer) is
  written at once, which fences any late write of the previous coordinator.

A group is served here only when both the placement being applied and the latest one
place it here (:meth:`owns`): a group moving away stops being served as soon as the
new view arrives; a group moving here is served once it is loaded.

:meth:`close` (a clean shutdown) writes every group's final state with
``released: true`` before the broker's session ends, so a graceful move loses no
commit; the local state is kept (a later start, clustered or not, has it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence

import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError

from rill.broker.cluster.checkpoint_store import CheckpointStore
from rill.client.zookeeper.registry import ClusterSnapshot, RegistryView
from rill.coordinator.group_checkpoint import Checkpoint, Decision, GroupSnapshot, Writer, claim, decide, must_wait
from rill.coordinator.group_coordinator import GroupCoordinator
from rill.coordinator.placement import coordinator_for
from rill.coordinator.records import GroupReleased, Record
from rill.v1 import coordinator_pb2 as pb

log = structlog.get_logger(__name__)

Sink = Callable[[Sequence[Record]], None]
POLL_S = 0.1
RETRY_BACKOFF_S = 0.5
ATTEMPTS = 3


def now_ms() -> int:
    return int(time.time() * 1000)


def live_brokers(snapshot: ClusterSnapshot) -> dict[int, pb.Broker]:
    """The rill brokers of a registry snapshot (a broker without a gRPC port coordinates nothing)."""
    return {b.broker_id: pb.Broker(broker_id=b.broker_id, host=b.host, port=b.port, grpc_port=b.grpc_port)
            for b in snapshot.brokers.values() if b.grpc_port > 0}


class GroupPlacement:
    """Router and checkpointer of one broker's coordinator in a cluster (see the module docstring)."""

    def __init__(self, coordinator: GroupCoordinator, sink: Sink, me: pb.Broker, instance: str, *,
                 interval_ms: int = 1000, handover_timeout_ms: int = 6000) -> None:
        self.groups = coordinator
        self.sink = sink
        self.me = me
        self.writer = Writer(me.broker_id, instance)
        self.interval_s = interval_ms / 1000
        self.handover_timeout_s = handover_timeout_ms / 1000
        self.store: CheckpointStore | None = None
        self._latest: tuple[int, Mapping[int, pb.Broker]] = (0, {})   # (version, live brokers)
        self._applied: frozenset[int] = frozenset()
        self._applied_version = 0
        self._started = False
        self._closing = False
        self._last: dict[str, tuple[Checkpoint, int]] = {}   # per group served here: last checkpoint and node version
        self._retry: set[str] = set()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._serving = threading.Event()   # set once a placement that counts this broker is applied
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ Router

    def owns(self, group: str) -> bool:
        if not self._started or self._closing:
            return False
        me = self.me.broker_id
        return coordinator_for(group, self._latest[1]) == me and coordinator_for(group, self._applied) == me

    def coordinator(self, group: str) -> pb.Broker | None:
        brokers = self._latest[1]
        found = coordinator_for(group, brokers)
        return None if found is None else brokers[found]

    def is_me(self, broker: pb.Broker) -> bool:
        return broker.broker_id == self.me.broker_id

    def checkpoint(self, group: str) -> Checkpoint | None:
        if self.store is None:
            return None
        try:
            return self.store.read(group)[0]
        except KazooException as exc:
            log.warning("group.checkpoint_read_failed", group=group, error=repr(exc))
            return None

    def checkpointed_groups(self) -> list[str]:
        """Every group with a node, tombstones included (their checkpoints say deleted)."""
        if self.store is None:
            return []
        try:
            return self.store.names()
        except KazooException as exc:
            log.warning("group.checkpoint_list_failed", error=repr(exc))
            return []

    @property
    def applied_brokers(self) -> frozenset[int]:
        """The live brokers of the placement in force (whose moves are done)."""
        return self._applied

    # ------------------------------------------------------------------ life cycle

    def wait_serving(self, timeout: float) -> bool:
        """Wait until a placement that counts this broker is applied (its groups loaded); False on timeout.

        Until then every group RPC here answers NOT_COORDINATOR, naming this broker for the
        groups it is about to take, so a broker waits for this before it calls itself started.
        """
        return self._serving.wait(timeout)

    def start(self, zk: KazooClient | None, registry: RegistryView, *, store: CheckpointStore | None = None,
              run: bool = True) -> None:
        """Start placing groups from ``registry``'s snapshots (the first placement runs on the worker).

        ``store`` replaces the ZooKeeper store of ``zk``; with ``run=False`` there is no
        worker thread and the caller drives :meth:`apply_placement` and
        :meth:`checkpoint_now` (tests).
        """
        if store is None:
            assert zk is not None, "a ZooKeeper client or a store"
            store = CheckpointStore(zk)
        self.store = store
        self._latest = (self._latest[0] + 1, live_brokers(registry.snapshot))  # the first placement runs even if empty
        registry.add_listener(self._on_snapshot)
        self._started = True
        if run:
            self._thread = threading.Thread(target=self._run, name="rill-group-placement", daemon=True)
            self._thread.start()
        log.info("group.placement_started", broker_id=self.me.broker_id, instance=self.writer.instance,
                 interval_ms=int(self.interval_s * 1000))

    def close(self) -> None:
        """Stop serving every group, write each one's final state (released), stop the worker. Idempotent."""
        if self._closing:
            return
        self._closing = True
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.handover_timeout_s)  # it may be waiting on an unreachable ZooKeeper
        if self.store is None:
            return
        names = self.groups.group_names()
        for name in names:
            with self.groups.group_locks.hold(name):  # calls in flight finish first
                pass
        released = self._release_all_bounded(names)
        if released is None:
            return
        log.info("group.placement_closed", broker_id=self.me.broker_id, released=released)

    def _release_all_bounded(self, names: list[str]) -> int | None:
        """The final released checkpoints, within ``zookeeper.session.timeout.ms``; None when not written.

        A broker must stop even when ZooKeeper is unreachable: kazoo would queue the
        writes until it reconnects, so they run on a thread that this waits for with a
        deadline (ending the session afterwards fails them). Unwritten, the groups'
        successors start from the last periodic checkpoint (the documented window).
        """
        assert self.store is not None
        if self.store.zk.state != KazooState.CONNECTED:
            log.error("group.release_skipped", reason="not connected to ZooKeeper", groups=len(names))
            return None
        outcome: list[int | BaseException] = []
        done = threading.Event()

        def release() -> None:
            try:
                outcome.append(self._write_released(names))
            except Exception as exc:  # reported below, on the closing thread
                outcome.append(exc)
            finally:
                done.set()

        threading.Thread(target=release, name="rill-group-release", daemon=True).start()
        if not done.wait(self.handover_timeout_s):
            log.error("group.release_timed_out", groups=len(names), timeout_s=self.handover_timeout_s)
            return None
        result = outcome[0]
        if isinstance(result, BaseException):
            log.error("group.release_failed", groups=len(names), error=repr(result))
            return None
        return result

    # ------------------------------------------------------------------ worker

    def _on_snapshot(self, snapshot: ClusterSnapshot) -> None:
        brokers = live_brokers(snapshot)
        if dict(self._latest[1]) != brokers:
            self._latest = (self._latest[0] + 1, brokers)
            self._wake.set()

    def _run(self) -> None:
        next_tick = time.monotonic() + self.interval_s
        while not self._stop.is_set():
            try:
                self.apply_placement()
                if time.monotonic() >= next_tick:
                    next_tick = time.monotonic() + self.interval_s
                    self.checkpoint_now()
            except Exception as exc:  # ZooKeeper trouble (or a bug): logged, retried
                log.warning("group.placement_failed", error=repr(exc), exc_info=not isinstance(exc, KazooException))
                self._stop.wait(RETRY_BACKOFF_S)
                continue
            self._wake.wait(max(0.0, next_tick - time.monotonic()))
            self._wake.clear()

    def apply_placement(self) -> None:
        """Release and take over groups for the latest view of the cluster, if it is not applied yet."""
        if self._latest[0] != self._applied_version:
            self._transition()

    def _transition(self) -> None:
        version, brokers = self._latest
        ids = frozenset(brokers)
        me = self.me.broker_id
        released = [n for n in self.groups.group_names() if coordinator_for(n, ids) != me]
        for name in released:
            self._release(name)
        store = self._store()
        candidates = set(store.names()) | set(self.groups.group_names())
        gained = sorted(n for n in candidates
                        if coordinator_for(n, ids) == me and coordinator_for(n, self._applied) != me)
        if not self._await_handover(gained, ids, version) or self._stop.is_set():
            return  # a newer view arrived (start over with it), or closing
        taken = [name for name in gained if self._take(name)]
        self._applied, self._applied_version = ids, version
        if me in ids:
            self._serving.set()
        log.info("group.placement_applied", broker_id=me, brokers=sorted(ids), released=len(released),
                 taken=len(taken))

    def _await_handover(self, gained: list[str], live: frozenset[int], version: int) -> bool:
        """Wait until no gained group's checkpoint is held by another live broker; False if the view changed."""
        store = self._store()
        waiting = [n for n in gained if must_wait(store.read(n)[0], self.writer, live)]
        deadline = time.monotonic() + self.handover_timeout_s
        while waiting and time.monotonic() < deadline and not self._stop.is_set():
            if self._latest[0] != version:
                return False
            self._stop.wait(POLL_S)
            waiting = [n for n in waiting if must_wait(store.read(n)[0], self.writer, live)]
        if waiting:
            log.warning("group.handover_timeout", groups=waiting[:20], count=len(waiting),
                        waited_s=self.handover_timeout_s)
        return True

    def _store(self) -> CheckpointStore:
        assert self.store is not None, "start() first"
        return self.store

    # ------------------------------------------------------------------ moves

    def _release(self, name: str) -> None:
        """The group is placed elsewhere now: write its final state and forget it."""
        with self.groups.group_locks.hold(name):
            if self.groups.export(name) is None:
                return
            self._write_released([name])
            self.sink([GroupReleased(name)])
            self._last.pop(name, None)

    def _write_released(self, names: list[str]) -> int:
        """Write the final state of each group this instance still writes, marked released; how many."""
        store = self._store()
        items: list[tuple[Checkpoint, int | None]] = []
        for name in names:
            snap = self.groups.export(name)
            if snap is None:
                continue
            previous, version = self._last.get(name) or store.read(name)
            if previous is not None and previous.writer != self.writer:
                log.warning("group.release_superseded", group=name, writer=previous.writer.broker_id,
                            seq=previous.seq)
                continue
            items.append((claim(name, snap, previous, self.writer, now_ms(), released=True), version))
        outcomes = store.write(items)
        for cp, _ in items:
            outcome = outcomes[cp.group]
            if isinstance(outcome, int):
                log.info("group.checkpoint_released", group=cp.group, seq=cp.seq, offsets=_offsets(cp.snapshot))
            else:
                log.warning("group.release_conflict", group=cp.group, error=repr(outcome))
        return sum(isinstance(o, int) for o in outcomes.values())

    def _take(self, name: str) -> bool:
        """The group is placed here now: load it (or keep the local state) and claim its checkpoint."""
        store = self._store()
        with self.groups.group_locks.hold(name):
            for _ in range(ATTEMPTS):
                cp, version = store.read(name)
                takeover = decide(name, self.groups.export(name), cp, self.writer)
                if takeover.records:
                    self.sink(takeover.records)
                if takeover.decision in (Decision.DROP, Decision.ABSENT):
                    self._last.pop(name, None)
                    return False
                snap = self.groups.export(name)
                new = claim(name, snap, cp, self.writer, now_ms())
                outcome = store.write([(new, version)])[name]
                if isinstance(outcome, int):
                    self._last[name] = (new, outcome)
                    log.info("group.taken_over", group=name, decision=takeover.decision.value, seq=new.seq,
                             previous_writer=cp.writer.broker_id if cp else None,
                             released=cp.released if cp else None,
                             generation=snap.generation if snap else 0, offsets=_offsets(snap))
                    return True
                if not isinstance(outcome, (BadVersionError, NodeExistsError)):
                    raise outcome
        raise KazooException(f"group {name}: its checkpoint kept changing while taking it over")

    # ------------------------------------------------------------------ checkpoints

    def checkpoint_now(self) -> None:
        """Write the groups that changed since the last round (one transaction per ~512 KiB)."""
        changed = self.groups.take_changed() | self._retry
        self._retry = set()
        owned = sorted(n for n in changed if self.owns(n))
        if not owned:
            return
        store = self._store()
        items: list[tuple[Checkpoint, int | None]] = []
        try:
            for name in owned:
                previous, version = self._last.get(name) or store.read(name)
                snap = self.groups.export(name)
                if snap is None and previous is None:
                    continue
                items.append((claim(name, snap, previous, self.writer, now_ms()), version))
            outcomes = store.write(items)
        except KazooException:
            self._retry.update(owned)
            raise
        conflicts = []
        for cp, _ in items:
            outcome = outcomes[cp.group]
            if isinstance(outcome, int):
                self._last[cp.group] = (cp, outcome)
            elif isinstance(outcome, (BadVersionError, NodeExistsError)):
                conflicts.append(cp.group)
            else:
                self._retry.add(cp.group)
        log.debug("group.checkpointed", groups=len(items) - len(conflicts), conflicts=len(conflicts))
        for name in conflicts:
            log.warning("group.checkpoint_conflict", group=name)
            self._last.pop(name, None)
            if self.owns(name):
                self._take(name)


def _offsets(snap: GroupSnapshot | None) -> int:
    return 0 if snap is None else len(snap.offsets)


__all__ = ["GroupPlacement", "live_brokers"]
