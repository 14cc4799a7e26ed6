"""What the ZooKeeper consumer sees of replicated topics, beside Kafka 0.7's layout.

A replicated topic is not under ``/brokers/topics`` (0.7 clients do not see it); it is
in rill's layout (rill.client.zookeeper.replica_layout): ``/rill/topics/[topic]`` lists
its partitions' replicas and ``.../partitions/[p]/state`` names each one's leader.
:class:`ReplicatedRegistryView` reads those states too, with a watch on each, so a new
leader reaches the consumer as a new snapshot, like any registry change.

Its partitions are named as Kafka 0.8's ZooKeeper consumer names them, by id
(``/consumers/[group]/owners/[topic]/3``, ``.../offsets/[topic]/3``), and are shared out
sorted as numbers (0.8's order). Partition ``p`` is ``p`` on every replica, so its
offsets stay valid when the leader changes; it is fetched from its leader, and a
partition without a leader is owned but not fetched until it has one.

If a name were both a 0.7 topic and a replicated one (brokers refuse to make that),
the replicated topic is the one consumed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import structlog
from kazoo.exceptions import NoNodeError

from rill.client.errors import InvalidTopic
from rill.client.zookeeper.registry import BrokerRegistration, ClusterSnapshot, RegistryView, parse_partition_name
from rill.client.zookeeper.replica_layout import NO_LEADER, PartitionState, TopicReplicas, state_path, topic_path
from rill.client.zookeeper.streams import ANY_REPLICA, PartitionKey

__all__ = ["ReplicatedRegistryView", "fetch_broker", "partition_key", "topic_partitions"]

log = structlog.get_logger(__name__)


class ReplicatedRegistryView(RegistryView):
    """A :class:`RegistryView` whose snapshots carry each replicated topic's leaders
    (``ClusterSnapshot.replicated_leaders``), kept current by watches on the state nodes."""

    def _read(self) -> ClusterSnapshot:
        snapshot = super()._read()
        leaders: dict[str, tuple[int, ...]] = {}
        for topic in sorted(snapshot.replicated_topics):
            found = self._leaders(topic)
            if found is not None:
                leaders[topic] = found
        return replace(snapshot, replicated_leaders=leaders)

    def _leaders(self, topic: str) -> tuple[int, ...] | None:
        """The leader of each partition of ``topic`` (NO_LEADER where none); None when the topic
        node is gone or malformed (logged)."""
        try:
            value = self._data(topic_path(topic))
            replicas = TopicReplicas.decode(value) if value is not None else None
        except (InvalidTopic, ValueError) as exc:
            log.warning("zookeeper.bad_replicated_topic", topic=topic, error=str(exc))
            return None
        if replicas is None:
            return None
        pending = [(p, self.zk.get_async(state_path(topic, p), watch=self._watch)) for p in range(replicas.partitions)]
        return tuple(self._leader(topic, p, result) for p, result in pending)

    def _leader(self, topic: str, partition: int, result: Any) -> int:
        try:
            data, _ = result.get()
            return PartitionState.decode(bytes(data)).leader
        except NoNodeError:  # written with the topic, in one transaction: gone with it
            return NO_LEADER
        except ValueError as exc:
            log.warning("zookeeper.bad_partition_state", path=state_path(topic, partition), error=str(exc))
            return NO_LEADER


def topic_partitions(snapshot: ClusterSnapshot) -> dict[str, list[str]]:
    """Every topic the consumer can subscribe to -> its partition names: a 0.7 topic's
    ``"broker-partition"`` names (0.7's string order), a replicated topic's ids (numeric order)."""
    names = {topic: snapshot.broker_partitions(topic) for topic in snapshot.topics}
    for topic, leaders in snapshot.replicated_leaders.items():
        names[topic] = [str(p) for p in range(len(leaders))]
    return names


def partition_key(topic: str, name: str) -> PartitionKey:
    """The key of a partition name of :func:`topic_partitions`. Raises ValueError for any other name."""
    if name.isdigit():
        return PartitionKey(topic, ANY_REPLICA, int(name))
    return PartitionKey(topic, *parse_partition_name(name))


def fetch_broker(snapshot: ClusterSnapshot, key: PartitionKey) -> BrokerRegistration | None:
    """The live broker to fetch ``key`` from: its 0.7 broker, or its replicated topic's leader; None if none."""
    if key.broker_id != ANY_REPLICA:
        return snapshot.brokers.get(key.broker_id)
    leaders = snapshot.replicated_leaders.get(key.topic, ())
    leader = leaders[key.partition] if key.partition < len(leaders) else NO_LEADER
    return snapshot.brokers.get(leader) if leader != NO_LEADER else None
