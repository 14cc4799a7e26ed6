"""Creating the internal groups topic, ``__rill_groups``, once the cluster has enough brokers.

The groups topic holds the group coordinators' state (rill.broker.cluster.group_log_placement).
As Kafka does for ``__consumer_offsets`` (since 0.11, KAFKA-3959), it is created with
``offsets.topic.num.partitions`` partitions and ``offsets.topic.replication.factor``
replicas only once that many brokers are live: a topic created smaller would stay
under-replicated for good. Until then no group has a coordinator (every broker answers
NOT_COORDINATOR and logs ``groups_topic.waiting_for_brokers``). Any broker may create it;
the first wins and the others find it. Its partition count never changes afterwards
(a group's partition depends on it), whatever the setting says later.
"""

from __future__ import annotations

from kazoo.client import KazooClient

import structlog

from rill.broker.cluster.partition_states import TopicExists, read_topic
from rill.broker.cluster.replicated_topics import create_topic, replica_brokers
from rill.client.topic_names import GROUPS_TOPIC
from rill.client.zookeeper.registry import ClusterSnapshot

__all__ = ["ensure_groups_topic"]

log = structlog.get_logger(__name__)


def ensure_groups_topic(zk: KazooClient, snapshot: ClusterSnapshot, partitions: int, replication_factor: int,
                        *, warned: set[int] | None = None) -> int | None:
    """The groups topic's partition count, creating the topic if the cluster has enough brokers.

    Returns None while fewer than ``replication_factor`` brokers are live (logged once per
    count of live brokers when ``warned`` is given).

    Raises:
        KazooException: ZooKeeper failed (retry later).
    """
    found = read_topic(zk, GROUPS_TOPIC)
    if found is not None:
        return len(found.replicas)
    live = replica_brokers(snapshot)
    if len(live) < replication_factor:
        if warned is None or len(live) not in warned:
            log.warning("groups_topic.waiting_for_brokers", topic=GROUPS_TOPIC, live_brokers=len(live),
                        replication_factor=replication_factor,
                        hint="no group has a coordinator until offsets.topic.replication.factor brokers are live "
                             "(set it to 1 for a one-broker cluster)")
            if warned is not None:
                warned.add(len(live))
        return None
    try:
        created = create_topic(zk, GROUPS_TOPIC, partitions, replication_factor, None, live)
    except TopicExists:
        found = read_topic(zk, GROUPS_TOPIC)
        return None if found is None else len(found.replicas)
    log.info("groups_topic.created", topic=GROUPS_TOPIC, partitions=partitions, replication_factor=replication_factor,
             brokers=live)
    return len(created.replicas)
