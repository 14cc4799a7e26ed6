"""Deleting a replicated topic: the marker in ZooKeeper, the controller's steps, and removing the topic's nodes.

Kafka's way (``TopicDeletionManager``, ZooKeeper mode), in four steps:

1. **Marked.** Admin DeleteTopic, on any broker, creates ``/rill/admin/delete_topics/[topic]``
   (:func:`mark_for_deletion`). The marker is the record: a controller that fails over
   finds it and carries on.
2. **Taken out of service.** The controller (controller_deletions.py), watching the
   markers, drops the topic from its context (no election, rebalance or role touches it
   again) and keeps a :class:`~rill.broker.cluster.controller_context.TopicDeletion`:
   the brokers that must confirm, every replica's broker and every live broker. A topic
   with a reassignment under way waits until it ends (Kafka marks it ineligible).
3. **Replicas stopped and deleted.** It sends each of those brokers a LeaderAndIsr
   naming every partition of the topic with no replicas and leader
   ``LEADER_DURING_DELETE`` (:func:`deletion_roles`): a broker holding a replica stops it
   and deletes its log, as for a replica a reassignment moved away
   (replica_removal.py), and every broker forgets the partitions, so METADATA no longer
   lists the topic and producers and consumers get UnknownTopic. This is Kafka's
   StopReplica(delete=true) and its UpdateMetadata in one request: it passes the same
   controller-epoch fence, in order with the roles. A broker that answers (no
   per-partition error) has confirmed; the others are asked again every
   :data:`RETRY_INTERVAL_S`. A broker holding a replica that is down keeps the deletion
   waiting until it returns (Kafka does the same), so no stale replica survives to leak
   into a new topic of the same name; a live broker without replicas that leaves is
   dropped from the wait (it restarts with no metadata). The brokers that confirmed are
   written into the marker (``{"version":1,"deleted":[1,3]}``, behind the epoch check),
   so a next controller does not wait for a broker that deleted its replicas and has
   stopped since (Kafka's new controller waits for it again).
4. **Nodes removed.** Once every broker confirmed, one transaction behind the
   controller's epoch check deletes the states, the partition nodes, the topic node and
   the marker (:func:`remove_topic_nodes`). The name is then free for a new topic, which
   starts empty.

Functions of a started ``KazooClient`` and the controller's worker thread (they update
the context they are given). Raises ``ControllerMoved`` (the epoch check failed) and
kazoo's ``KazooException`` as partition_states.py says.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping

import grpc
import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError, RolledBackError
from kazoo.protocol.states import WatchedEvent

from rill.broker.cluster.controller_context import ControllerContext, TopicDeletion
from rill.broker.cluster.partition_states import ControllerMoved
from rill.broker.cluster.replica_control_servicer import ReplicaControlClient, brokers_to_proto, role_to_proto
from rill.broker.replication.replica import PartitionRole
from rill.client.zookeeper.replica_layout import (DELETE_TOPICS_PATH, LEADER_DURING_DELETE, delete_marker_path,
                                                  partition_path, partitions_path, topic_path)
from rill.v1 import replication_pb2 as rpb

__all__ = ["RETRY_INTERVAL_S", "begin_deletion", "deletion_roles", "mark_for_deletion", "marked_topics",
           "read_progress", "remove_topic_nodes", "send_deletion", "unmark", "write_progress"]

log = structlog.get_logger(__name__)

RETRY_INTERVAL_S = 1.0
PROGRESS_VERSION = 1


def mark_for_deletion(zk: KazooClient, topic: str) -> bool:
    """Create ``/rill/admin/delete_topics/[topic]`` (and its parents); False when it was marked already."""
    try:
        zk.create(delete_marker_path(topic), b"", makepath=True)
    except NodeExistsError:
        return False
    return True


def marked_topics(zk: KazooClient, watch: Callable[[WatchedEvent], None] | None = None) -> list[str]:
    """The topics marked for deletion, sorted; ``watch`` (a kazoo watcher) is set on the children, or on the
    path's creation while it does not exist."""
    while True:
        try:
            return sorted(zk.get_children(DELETE_TOPICS_PATH, watch=watch))
        except NoNodeError:
            if zk.exists(DELETE_TOPICS_PATH, watch=watch) is None:
                return []


def unmark(zk: KazooClient, ctx: ControllerContext, name: str) -> None:
    """Delete a marker that names no replicated topic (``name``: the marker node's, a topic name or not), behind
    the epoch check. Raises ControllerMoved."""
    tx = zk.transaction()
    tx.check(ctx.epoch.check.path, ctx.epoch.check.version)
    tx.delete(f"{DELETE_TOPICS_PATH}/{name}")
    epoch_result, _ = tx.commit()  # a marker gone meanwhile (NoNodeError) is what was wanted
    if isinstance(epoch_result, Exception) and not isinstance(epoch_result, RolledBackError):
        raise ControllerMoved(f"unmarking {name}: the controller epoch check failed")


def begin_deletion(zk: KazooClient, ctx: ControllerContext, topic: str) -> TopicDeletion:
    """Step 2: take ``topic`` out of ``ctx`` into ``ctx.deleting``, the brokers its marker lists as done already
    confirmed. The caller checked it is held and not moving."""
    replicas = ctx.topics[topic]
    epochs = {p: ctx.states[(topic, p)][0].leader_epoch for p in range(replicas.partitions) if (topic, p) in ctx.states}
    hosts = {b for listed in replicas.replicas for b in listed}
    done = read_progress(zk, topic)
    ctx.drop_topic(topic)
    deletion = ctx.deleting[topic] = TopicDeletion(replicas, epochs, (hosts | set(ctx.live)) - done, set(done))
    log.info("controller.topic_deletion_started", topic=topic, partitions=replicas.partitions,
             replica_brokers=sorted(hosts), done_before=sorted(done), epoch=ctx.epoch.epoch)
    return deletion


def read_progress(zk: KazooClient, topic: str) -> set[int]:
    """The brokers the marker lists as done (none for Admin's empty marker, or a malformed one, logged)."""
    try:
        data, _ = zk.get(delete_marker_path(topic))
    except NoNodeError:
        return set()
    if not data:
        return set()
    try:
        value = json.loads(data)
        done = value["deleted"]
        if value.get("version") != PROGRESS_VERSION or not all(type(b) is int for b in done):
            raise ValueError(f"not a version {PROGRESS_VERSION} list of broker ids")
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("controller.deletion_marker_unreadable", topic=topic, error=str(exc), value=bytes(data[:80]))
        return set()
    return set(done)


def write_progress(zk: KazooClient, ctx: ControllerContext, topic: str, done: Collection[int]) -> None:
    """Record in the marker the brokers done, behind the epoch check. Raises ControllerMoved."""
    tx = zk.transaction()
    tx.check(ctx.epoch.check.path, ctx.epoch.check.version)
    tx.set_data(delete_marker_path(topic), json.dumps({"version": PROGRESS_VERSION, "deleted": sorted(done)},
                                                      separators=(",", ":")).encode())
    epoch_result, write_result = tx.commit()
    if isinstance(epoch_result, Exception) and not isinstance(epoch_result, RolledBackError):
        raise ControllerMoved(f"recording the deletion of {topic}: the controller epoch check failed")
    if isinstance(write_result, Exception):
        log.warning("controller.deletion_progress_not_written", topic=topic, error=type(write_result).__name__)


def deletion_roles(topic: str, deletion: TopicDeletion) -> list[PartitionRole]:
    """Every partition with no replicas and leader LEADER_DURING_DELETE, one leader epoch above the last known
    (so a broker's replica, never in a later epoch, is stopped: replica_removal.leaving_replicas)."""
    return [PartitionRole(topic, p, LEADER_DURING_DELETE, deletion.leader_epochs.get(p, 0) + 1, (), (), 0)
            for p in range(deletion.replicas.partitions)]


def send_deletion(client: ReplicaControlClient, ctx: ControllerContext, controller_id: int, topic: str,
                  timeout_s: float) -> set[int]:
    """Step 3: send the deletion roles to the live brokers still waiting; returns those that confirmed (and
    drops them from the wait, with the brokers without replicas that are no longer live)."""
    deletion = ctx.deleting[topic]
    hosts = {b for listed in deletion.replicas.replicas for b in listed}
    deletion.waiting = {b for b in deletion.waiting if b in hosts or b in ctx.live}
    targets = {client.address(ctx.live[b]): b for b in deletion.waiting if b in ctx.live}
    if not targets:
        return set()
    request = rpb.LeaderAndIsrRequest(controller_id=controller_id, controller_epoch=ctx.epoch.epoch,
                                      partitions=[role_to_proto(r) for r in deletion_roles(topic, deletion)],
                                      live_brokers=brokers_to_proto(ctx.brokers()), full=False,
                                      replication_throttle_bytes_per_second=ctx.throttle)
    answers = client.leader_and_isr_all({a: request for a in targets}, timeout_s)
    confirmed = {targets[a] for a, answer in answers.items() if _confirms(answer, targets[a], topic)}
    deletion.waiting -= confirmed
    deletion.confirmed |= confirmed
    return confirmed


def _confirms(answer: rpb.LeaderAndIsrResponse | grpc.RpcError, broker: int, topic: str) -> bool:
    if isinstance(answer, grpc.RpcError):
        log.warning("controller.deletion_send_failed", to=broker, topic=topic, code=str(_code(answer)))
        return False
    if answer.error != rpb.ReplicaControlError.NONE:
        log.warning("controller.deletion_refused", to=broker, topic=topic,
                    error=rpb.ReplicaControlError.Code.Name(answer.error))
        return False
    failed = [(p.partition, p.code) for p in answer.partitions if p.topic == topic and p.code]
    if failed:
        log.warning("controller.replica_deletion_failed", to=broker, topic=topic, partitions=failed[:20])
    return not failed


def _code(error: grpc.RpcError) -> object:
    return error.code() if callable(getattr(error, "code", None)) else None


def remove_topic_nodes(zk: KazooClient, ctx: ControllerContext, topic: str) -> bool:
    """Step 4: delete the topic's nodes (states, partitions, the topic node) and its marker in one transaction
    behind the epoch check. False (logged) when ZooKeeper refused it (a node changed meanwhile): try again.

    Raises:
        ControllerMoved: the epoch check failed.
    """
    children = _partition_children(zk, topic)
    tx = zk.transaction()
    tx.check(ctx.epoch.check.path, ctx.epoch.check.version)
    for p, names in sorted(children.items()):
        for name in names:
            tx.delete(f"{partition_path(topic, p)}/{name}")
        tx.delete(partition_path(topic, p))
    if children or zk.exists(partitions_path(topic)) is not None:
        tx.delete(partitions_path(topic))
    tx.delete(topic_path(topic))
    tx.delete(delete_marker_path(topic))
    results = tx.commit()
    failure = next(((i, r) for i, r in enumerate(results)
                    if isinstance(r, Exception) and not isinstance(r, RolledBackError)), None)
    if failure is None:
        return True
    index, exc = failure
    if index == 0:
        raise ControllerMoved(f"deleting topic {topic}: the controller epoch check failed ({type(exc).__name__})")
    log.warning("controller.topic_nodes_not_deleted", topic=topic, operation=index, error=type(exc).__name__)
    return False


def _partition_children(zk: KazooClient, topic: str) -> Mapping[int, Collection[str]]:
    """Each partition node of ``topic`` and its children's names (pipelined reads); {} without partitions."""
    try:
        partitions = [int(name) for name in zk.get_children(partitions_path(topic)) if name.isdigit()]
    except NoNodeError:
        return {}
    pending = [(p, zk.get_children_async(partition_path(topic, p))) for p in partitions]
    found: dict[int, list[str]] = {}
    for p, result in pending:
        try:
            found[p] = list(result.get())
        except NoNodeError:
            continue
    return found

