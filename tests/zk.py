"""The tests' ZooKeeper: the launcher ``rill perf`` uses too (rill.client.cli.spawned_zookeeper)."""

from rill.client.cli.spawned_zookeeper import (ZkEnsemble, ZkNode, ZkServer, ZooKeeperMissing, classpath,
                                               four_letter, free_ports)

__all__ = ["ZkEnsemble", "ZkNode", "ZkServer", "ZooKeeperMissing", "classpath", "four_letter", "free_ports"]
