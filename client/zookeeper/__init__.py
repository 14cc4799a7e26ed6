"""rill.client.zookeeper: clients that coordinate through ZooKeeper the Kafka 0.7 way.

The registry view (brokers and their topics), the ZooKeeper consumer (seed 000's
registration and rebalancing, offsets in ZooKeeper) and the ZooKeeper-aware producer.
"""

from rill.client.zookeeper.assignment import FilterSubscription, StaticSubscription
from rill.client.zookeeper.zk_consumer import Blacklist, Whitelist, ZkConsumer, ZkConsumerError, ZkStream
from rill.client.zookeeper.streams import PartitionKey, ZkRecord

__all__ = [
    "Blacklist", "FilterSubscription", "PartitionKey", "StaticSubscription", "Whitelist", "ZkConsumer",
    "ZkConsumerError", "ZkRecord", "ZkStream",
]
