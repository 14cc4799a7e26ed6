"""Admin DeleteTopic, as any broker answers it (Kafka's DeleteTopics).

- An illegal name, or an internal one (``__rill...``: ``__rill_groups`` holds the
  consumer groups' state), is INVALID_TOPIC; with ``delete.topic.enable`` false every
  request is TOPIC_DELETION_DISABLED (Kafka's key and code).
- **A replicated topic** (in a cluster): refused with REASSIGNMENT_IN_PROGRESS while
  partitions of it are being moved; otherwise the broker marks it for deletion
  (topic_deletion.py: ``/rill/admin/delete_topics/[topic]``, created once however many
  ask) and waits, up to the request's timeout, for the controller to remove the topic's
  node, which it does once every broker has deleted its replicas. Past the timeout the
  answer is REQUEST_TIMED_OUT: the topic stays marked and its deletion completes by
  itself (a broker holding a replica that is down holds it until it returns).
- **A Kafka 0.7-style topic** (or any topic of a broker without ZooKeeper): the broker
  asked deletes its own partitions of it (local_topic_deletion.py). In a cluster each
  broker holds its own partitions of such a topic, so each must be asked; this one
  removes its ``/brokers/topics/[topic]/[id]`` node, and the last one the topic's
  partition map (registration.py). A broker that holds none answers
  UNKNOWN_TOPIC_OR_PARTITION.

:func:`delete_topic` runs on a gRPC worker thread (it may wait) and never raises.
"""

from __future__ import annotations

import threading
import time

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.protocol.states import WatchedEvent

from rill.broker.cluster.partition_states import read_topic
from rill.broker.cluster.topic_deletion import mark_for_deletion
from rill.broker.log.manager import LogManager
from rill.client.errors import InvalidRequest, StorageError, UnknownTopic
from rill.client.topic_names import is_internal_topic, is_valid_topic
from rill.client.zookeeper.replica_layout import TopicReplicas, topic_path
from rill.v1 import admin_pb2 as apb
from rill.v1 import coordinator_pb2 as pb

__all__ = ["DEFAULT_TIMEOUT_MS", "delete_topic"]

log = structlog.get_logger(__name__)

DEFAULT_TIMEOUT_MS = 30_000
POLL_S = 0.5

Response = apb.DeleteTopicResponse


def delete_topic(request: apb.DeleteTopicRequest, logs: LogManager, zk: KazooClient | None, *,
                 enabled: bool = True) -> apb.DeleteTopicResponse:
    """The answer to ``request`` (module docstring)."""
    topic = request.topic
    if not is_valid_topic(topic):
        return Response(error_code=pb.INVALID_TOPIC, error_message=f"invalid topic name {topic!r}")
    if is_internal_topic(topic):
        return Response(error_code=pb.INVALID_TOPIC, error_message=f"topic {topic!r} is internal to rill (names "
                        "beginning with '__rill' are reserved; __rill_groups holds the consumer groups' state)")
    if not enabled:
        return Response(error_code=pb.TOPIC_DELETION_DISABLED,
                        error_message="topic deletion is disabled on this broker (delete.topic.enable=false)")
    if zk is not None:
        try:
            replicas = read_topic(zk, topic)
        except ValueError as exc:
            return Response(error_code=pb.UNKNOWN, error_message=f"topic {topic}'s node is malformed: {exc}")
        except KazooException as exc:
            return Response(error_code=pb.UNKNOWN, error_message=f"ZooKeeper failed ({exc!r}); ask again")
        if replicas is not None:
            timeout_ms = request.timeout_ms if request.timeout_ms > 0 else DEFAULT_TIMEOUT_MS
            return _delete_replicated(zk, topic, replicas, timeout_ms / 1000)
    return _delete_local(logs, topic, clustered=zk is not None)


def _delete_replicated(zk: KazooClient, topic: str, replicas: TopicReplicas, timeout_s: float) -> apb.DeleteTopicResponse:
    if replicas.adding:
        return Response(error_code=pb.REASSIGNMENT_IN_PROGRESS, replicated=True, error_message=(
            f"partitions {replicas.reassigning()} of topic {topic} are being reassigned: delete it once the move is "
            "complete (rill topics reassign --verify)"))
    try:
        first = mark_for_deletion(zk, topic)
        log.info("admin.topic_marked_for_deletion", topic=topic, partitions=replicas.partitions, already=not first)
        gone = _wait_gone(zk, topic, timeout_s)
    except KazooException as exc:
        log.warning("admin.delete_topic_failed", topic=topic, error=repr(exc))
        return Response(error_code=pb.UNKNOWN, replicated=True, error_message=(
            f"ZooKeeper failed ({exc!r}): topic {topic} may or may not be marked for deletion; ask again"))
    if not gone:
        return Response(error_code=pb.REQUEST_TIMED_OUT, replicated=True, partitions=replicas.partitions,
                        error_message=(f"topic {topic} is marked for deletion, but its deletion was not complete "
                                       f"after {timeout_s:g} s (is a broker holding replicas of it down?); it "
                                       "completes by itself"))
    return Response(replicated=True, partitions=replicas.partitions)


def _wait_gone(zk: KazooClient, topic: str, timeout_s: float) -> bool:
    """Whether the topic's node is deleted within ``timeout_s`` (a watch on it, and a poll as a backstop)."""
    changed = threading.Event()

    def watch(_event: WatchedEvent) -> None:
        changed.set()

    deadline = time.monotonic() + timeout_s
    while zk.exists(topic_path(topic), watch=watch) is not None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        changed.wait(min(remaining, POLL_S))
        changed.clear()
    return True


def _delete_local(logs: LogManager, topic: str, *, clustered: bool) -> apb.DeleteTopicResponse:
    try:
        count = logs.delete_topic(topic)
    except UnknownTopic:
        where = (" and no partition of a Kafka 0.7-style topic of that name on this broker (each broker deletes "
                 "its own: ask the brokers that hold it)") if clustered else ""
        return Response(error_code=pb.UNKNOWN_TOPIC_OR_PARTITION,
                        error_message=f"unknown topic {topic}" + (": no replicated topic" + where if clustered else ""))
    except InvalidRequest as exc:
        return Response(error_code=pb.INVALID_REQUEST, error_message=str(exc))
    except StorageError as exc:
        return Response(error_code=pb.STORAGE_ERROR, error_message=str(exc))
    log.info("admin.local_topic_deleted", topic=topic, partitions=count)
    return Response(partitions=count)
