"""rill.client.zookeeper: clients that coordinate through ZooKeeper the Kafka 0.7 way.

The registry view (brokers and their topics), the ZooKeeper consumer (seed 000's
registration and rebalancing, offsets in ZooKeeper) and the ZooKeeper-aware producer.
"""
