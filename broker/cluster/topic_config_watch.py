"""How a topic's settings, changed at run time, reach the brokers: through the controller.

The controller reads every replicated topic's node with a data watch
(``partition_states.read_topic(..., watch=)``). When a node changes (Admin
AlterTopicConfig wrote it), the watch posts :func:`reload_topic_config` to the
controller's worker, which reads the node again (setting the next watch), keeps the
new settings in its context and returns the topic's partitions; the controller then
sends them to every live broker in one LeaderAndIsr, with their leader epochs
unchanged. A broker applies a LeaderAndIsr of the epoch it already has only for the
settings it carries (``ReplicaManager``: ``min.insync.replicas`` for the next acks=all
produce). ``unclean.leader.election.enable`` is the controller's own: its next
election reads the context.

Why the controller pushes rather than each broker watching: a broker learns a topic's
roles and settings from one source in one order, a broker that starts (or reconnects)
gets the current settings in its full LeaderAndIsr, and only one ZooKeeper session
holds a watch per topic. A broker that misses the send (it did not answer in time)
keeps the old settings until its next LeaderAndIsr, as for any other change.

Functions of the controller's worker thread (they update the context they are given).
"""

from __future__ import annotations

from collections.abc import Callable

import structlog
from kazoo.client import KazooClient
from kazoo.protocol.states import EventType, WatchedEvent

from rill.broker.cluster.controller_context import ControllerContext
from rill.broker.cluster.partition_states import PartitionKey, read_topic
from rill.client.zookeeper.registry import RILL_TOPICS_PATH

__all__ = ["changed_topic", "reload_topic_config"]

log = structlog.get_logger(__name__)


def changed_topic(event: WatchedEvent) -> str | None:
    """The topic whose node's data changed, from a data watch's event; None for any other event."""
    prefix = RILL_TOPICS_PATH + "/"
    if event.type != EventType.CHANGED or not event.path.startswith(prefix):
        return None
    topic = event.path[len(prefix):]
    return topic if topic and "/" not in topic else None


def reload_topic_config(zk: KazooClient, ctx: ControllerContext, topic: str,
                        watch: Callable[[WatchedEvent], None]) -> list[PartitionKey]:
    """Read ``topic``'s node again (watching it) into ``ctx``; the partitions to send when its settings changed.

    Returns:
        The topic's partitions in order; [] when the controller does not hold the topic,
        the node is gone or unreadable, or its settings are the same (the assignment is
        not changed at run time; a node whose replicas differ is logged and ignored).

    Raises:
        KazooException: from ZooKeeper.
    """
    held = ctx.topics.get(topic)
    if held is None:
        return []
    try:
        fresh = read_topic(zk, topic, watch=watch)
    except ValueError as exc:
        log.error("controller.topic_unreadable", topic=topic, error=str(exc))
        return []
    if fresh is None:
        return []  # deleted: the children watch drops it
    if fresh.replicas != held.replicas:
        log.error("controller.assignment_changed_ignored", topic=topic)
        return []
    if dict(fresh.config) == dict(held.config):
        return []
    ctx.topics[topic] = fresh
    log.info("controller.topic_config_changed", topic=topic, before=dict(held.config), after=dict(fresh.config),
             epoch=ctx.epoch.epoch)
    return [(topic, p) for p in range(fresh.partitions) if (topic, p) in ctx.states]
