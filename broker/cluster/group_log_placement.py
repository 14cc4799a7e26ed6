"""Groups in a cluster: each lives in a partition of ``__rill_groups``, coordinated by its leader.

With ``zookeeper.connect`` set, :class:`GroupLogPlacement` is the coordinator's
:class:`~rill.coordinator.routing.Router` and its :class:`~rill.coordinator.group_shards.Shards`.
A group's state lives in partition ``partition_for(group, N)`` of the internal, replicated
topic ``__rill_groups`` (rill.coordinator.group_partitioning: Kafka's mapping); the leader
of that partition is the group's coordinator (Kafka 0.9's design, notes/replication.md §5):

- **Becoming leader** of partition ``p`` starts a leadership term (group_partition_log).
  The loader thread then replays ``p``'s log from its start to its end into the
  coordinator and serves its groups from then on (:meth:`owns`). Until loaded, the
  partition's groups answer NOT_COORDINATOR, naming this broker, and clients retry.
  An empty log is first seeded from the pre-upgrade state (rill.broker.cluster.group_import).
- **Records** of a group go to its partition through an
  :class:`~rill.coordinator.offsets_log.OffsetStore` over the leader's log; a commit is
  acknowledged once the partition's high watermark passes it, so every in-sync replica,
  hence whoever the controller elects next, has it. Compaction appends a snapshot of the
  partition's groups and deletes older segments; followers drop theirs below the leader's
  log start (fetch_block.py).
- **Losing leadership** ends the term: appends and waits for it fail (NOT_COORDINATOR),
  then the loader drops the partition's groups from memory (their members get
  NOT_COORDINATOR and look the coordinator up again with ListGroups).

The topic itself is created by the first broker that sees enough live brokers
(rill.broker.cluster.groups_topic). Which broker leads a partition, and where it listens,
come from the controller's LeaderAndIsr (every broker learns every partition's leader).

Thread-safety: role changes are observed on the event loop (terms are kept there), loads
and unloads run on the loader thread; ``owns``, ``coordinator`` and ``shard_for`` read
copy-on-write state and may be called from any thread.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from rill.broker.cluster.checkpoint_store import CheckpointStore
from rill.broker.cluster.group_import import import_records
from rill.broker.cluster.group_partition_log import HighWatermarkCommit, LeadershipTerm, PartitionRecordLog
from rill.broker.cluster.groups_topic import ensure_groups_topic
from rill.broker.dataplane.storage import Loop
from rill.broker.replication.replica import Replica, Role
from rill.broker.replication.replica_manager import ReplicaManager
from rill.client.topic_names import GROUPS_TOPIC
from rill.client.zookeeper.registry import ClusterSnapshot, RegistryView
from rill.coordinator.group_checkpoint import GroupSnapshot, Writer
from rill.coordinator.group_coordinator import GroupCoordinator
from rill.coordinator.group_partitioning import partition_for
from rill.coordinator.group_shards import NotCoordinator, Shard
from rill.coordinator.offsets_log import OffsetStore
from rill.coordinator.records import GroupReleased
from rill.v1 import coordinator_pb2 as pb

__all__ = ["GroupLogPlacement", "GroupsTopicSettings", "live_brokers"]

log = structlog.get_logger(__name__)

RETRY_S = 1.0


def live_brokers(snapshot: ClusterSnapshot) -> dict[int, pb.Broker]:
    """The rill brokers of a registry snapshot (a broker without a gRPC port coordinates nothing)."""
    return {b.broker_id: pb.Broker(broker_id=b.broker_id, host=b.host, port=b.port, grpc_port=b.grpc_port)
            for b in snapshot.brokers.values() if b.grpc_port > 0}


@dataclass(frozen=True)
class GroupsTopicSettings:
    partitions: int = 50           # offsets.topic.num.partitions
    replication_factor: int = 3    # offsets.topic.replication.factor
    store: Mapping[str, int] = field(default_factory=dict)  # OffsetStore keyword arguments (compaction)


@dataclass(eq=False)
class _Loaded:
    term: LeadershipTerm
    shard: Shard


class GroupLogPlacement:
    """Router and shards of one broker's coordinator in a cluster (see the module docstring)."""

    def __init__(self, coordinator: GroupCoordinator, replicas: ReplicaManager, loop: Loop, me: pb.Broker,
                 writer: Writer, settings: GroupsTopicSettings, *,
                 legacy: Mapping[str, GroupSnapshot] | None = None) -> None:
        self.groups = coordinator
        self.replicas = replicas
        self.loop = loop
        self.me = me
        self.writer = writer
        self.settings = settings
        self.legacy = dict(legacy or {})
        self.appended: Callable[[Replica], None] = lambda _replica: None
        """Set by the broker: wakes followers and long polls after an append (on the loop)."""
        self.zk: KazooClient | None = None
        self.registry: RegistryView | None = None
        self.count: int | None = None  # the groups topic's partitions, once it exists
        self._loaded: dict[int, _Loaded] = {}  # copy-on-write; written by the loader
        self._terms: dict[int, LeadershipTerm] = {}  # on the loop
        self._term_numbers = 0
        self._events: queue.Queue[tuple[int, LeadershipTerm | None] | None] = queue.Queue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned: set[int] = set()
        self._looked = False  # the loader has looked for the topic once
        replicas.on_role_change.append(self._on_role_change)

    # ------------------------------------------------------------------ Router and Shards

    def _partition(self, group: str) -> int | None:
        count = self.count
        return None if count is None else partition_for(group, count)

    def owns(self, group: str) -> bool:
        p = self._partition(group)
        loaded = None if p is None else self._loaded.get(p)
        return loaded is not None and not loaded.term.ended

    def shard_for(self, group: str) -> Shard:
        p = self._partition(group)
        loaded = None if p is None else self._loaded.get(p)
        if loaded is None or loaded.term.ended:
            raise NotCoordinator(f"group {group!r}: its partition of {GROUPS_TOPIC} is not served here")
        return loaded.shard

    def coordinator(self, group: str) -> pb.Broker | None:
        p = self._partition(group)
        if p is None:
            self._events.put((-1, None))  # look for (or create) the topic now
            return None
        leader = self.replicas.partition_leaders.get(GROUPS_TOPIC, {}).get(p, -1)
        if leader == self.me.broker_id:
            return self.me
        info = self.replicas.brokers.get(leader) if leader >= 0 else None
        if info is None:
            return None
        return pb.Broker(broker_id=info.broker_id, host=info.host, port=info.port, grpc_port=info.grpc_port)

    def is_me(self, broker: pb.Broker) -> bool:
        return broker.broker_id == self.me.broker_id

    def live_brokers(self) -> list[pb.Broker]:
        """Every live broker with a coordinator (for ListGroups of every group), this one included."""
        if self.registry is None:
            return [self.me]
        return sorted(live_brokers(self.registry.snapshot).values(), key=lambda b: b.broker_id)

    def loaded_partitions(self) -> list[int]:
        return sorted(p for p, loaded in self._loaded.items() if not loaded.term.ended)

    # ------------------------------------------------------------------ life cycle

    def start(self, zk: KazooClient, registry: RegistryView) -> None:
        self.zk, self.registry = zk, registry
        registry.add_listener(lambda _snapshot: self._events.put((-1, None)) if self.count is None else None)
        self.loop.call_soon_threadsafe(self._scan_roles)  # roles that arrived before start
        self._thread = threading.Thread(target=self._run, name="rill-group-loader", daemon=True)
        self._thread.start()
        log.info("group.placement_started", broker_id=self.me.broker_id, topic=GROUPS_TOPIC,
                 partitions=self.settings.partitions, replication_factor=self.settings.replication_factor)

    def wait_serving(self, timeout: float) -> bool:
        """Wait until this broker serves the groups it should: the groups topic exists, the controller
        named every partition's leader, and those led here are loaded. False on timeout, and at once
        (True) while the topic cannot be created yet (too few live brokers): nothing to wait for."""
        deadline = time.monotonic() + timeout
        while not self._stop.is_set():
            if self._ready():
                return True
            if self._looked and self.count is None:
                return True
            if time.monotonic() >= deadline:
                return False
            self._stop.wait(0.02)
        return False

    def serving_all(self) -> bool:
        """Does the groups topic exist, with every partition led, and those led here loaded?"""
        return self._ready()

    def _ready(self) -> bool:
        count = self.count
        if count is None:
            return False
        leaders = self.replicas.partition_leaders.get(GROUPS_TOPIC, {})
        if len(leaders) < count or any(leaders.get(p, -1) < 0 for p in range(count)):
            return False
        return all(p in self._loaded for p in range(count) if leaders[p] == self.me.broker_id)

    def close(self) -> None:
        """Stop the loader and drop every group from memory (their state is in the groups topic). Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._events.put(None)
        if self._thread is not None:
            self._thread.join(timeout=10)
        for p in list(self._loaded):
            self._unload(p, "broker stopping")

    # ------------------------------------------------------------------ terms, on the loop

    def _on_role_change(self, topic: str, partition: int) -> None:
        if topic != GROUPS_TOPIC:
            return
        replica = self.replicas.replicas.get((topic, partition))
        leading = replica is not None and replica.role is Role.LEADER
        term = self._terms.get(partition)
        if leading and term is None:
            self._term_numbers += 1
            term = self._terms[partition] = LeadershipTerm(topic, partition, self._term_numbers)
        elif not leading and term is not None:
            term.ended = True
            del self._terms[partition]
            term = None
        else:
            return
        self._events.put((partition, term))

    def _scan_roles(self) -> None:
        for topic, partition in list(self.replicas.replicas):
            self._on_role_change(topic, partition)

    # ------------------------------------------------------------------ the loader

    def _run(self) -> None:
        desired: dict[int, LeadershipTerm | None] = {}
        while not self._stop.is_set():
            try:
                event = self._events.get(timeout=RETRY_S)
            except queue.Empty:
                event = (-1, None)
            if event is None:
                return
            partition, term = event
            if partition >= 0:
                desired[partition] = term
            try:
                if self.count is None:
                    self._find_topic()
                for p in sorted(desired):
                    self._settle(p, desired[p])
                    wanted = desired[p]
                    if wanted is None or wanted.ended or p in self._loaded:
                        del desired[p]
            except Exception as exc:  # ZooKeeper trouble or a failed load: logged, retried
                log.warning("group.load_failed", error=repr(exc), exc_info=not isinstance(exc, KazooException))
                self._stop.wait(RETRY_S)

    def _find_topic(self) -> None:
        if self.zk is None or self.registry is None:
            return
        self.count = ensure_groups_topic(self.zk, self.registry.snapshot, self.settings.partitions,
                                         self.settings.replication_factor, warned=self._warned)
        self._looked = True

    def _settle(self, p: int, term: LeadershipTerm | None) -> None:
        loaded = self._loaded.get(p)
        if loaded is not None and loaded.term is not term:
            self._unload(p, "leadership moved")
        if term is not None and not term.ended and p not in self._loaded and self.count is not None:
            self._load(p, term)

    def _load(self, p: int, term: LeadershipTerm) -> None:
        replica = self.replicas.replicas.get((GROUPS_TOPIC, p))
        if replica is None:
            return
        count = self.count
        assert count is not None
        record_log = PartitionRecordLog(replica, term, self.replicas, self.loop, self.appended)
        store = OffsetStore(record_log, commit=HighWatermarkCommit(replica, term, self.replicas, self.loop),
                            **self.settings.store)
        replayed = 0
        for record in store.replay():
            if partition_for(record.group, count) == p:
                self.groups.replay(record, loading=True)
                replayed += 1
        shard = Shard(store, lambda name: partition_for(name, count) == p)
        if record_log.end_offset == 0:
            self._seed(p, shard)
        if term.ended:
            self._drop_groups(p)
            return
        self._loaded = {**self._loaded, p: _Loaded(term, shard)}
        log.info("group.partition_loaded", partition=p, term=term.number, leader_epoch=replica.leader_epoch,
                 records=replayed, groups=len(self._groups_of(p)), end_offset=record_log.end_offset)

    def _seed(self, p: int, shard: Shard) -> None:
        """An empty partition: import its groups from before the upgrade (group_import), once."""
        checkpoints = CheckpointStore(self.zk) if self.zk is not None else None
        records = import_records(shard.holds, checkpoints, self.legacy, self.writer)
        if not records:
            return
        shard.store.append(records, None)
        self.groups.apply(records)
        log.info("group.partition_seeded", partition=p, records=len(records))

    def _unload(self, p: int, reason: str) -> None:
        loaded = self._loaded.get(p)
        if loaded is None:
            return
        self._loaded = {k: v for k, v in self._loaded.items() if k != p}
        dropped = self._drop_groups(p)
        loaded.shard.store.close()
        log.info("group.partition_unloaded", partition=p, term=loaded.term.number, groups=dropped, reason=reason)

    def _drop_groups(self, p: int) -> int:
        names = self._groups_of(p)
        for name in names:
            with self.groups.group_locks.hold(name):  # calls in flight finish (and fail) first
                self.groups.apply([GroupReleased(name)])
        return len(names)

    def _groups_of(self, p: int) -> list[str]:
        count = self.count
        return [] if count is None else [n for n in self.groups.group_names() if partition_for(n, count) == p]
