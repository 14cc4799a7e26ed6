"""Creating a replicated topic in ZooKeeper (any broker may), and reading a broker's epoch.

:func:`create_topic` assigns replicas over the live brokers (Kafka's rack-unaware
assignment, ``replica_assignment``), gives each partition its initial state (leader =
the first replica, ISR = every replica, leader epoch 0, the current controller epoch)
and creates it all in one unfenced transaction. The controller notices the new child
of ``/rill/topics`` through its watch and sends the brokers their roles.

One transaction must stay under ZooKeeper's 1 MiB request limit (about 3,900
partitions of factor 3), so a replicated topic is limited to
:data:`MAX_REPLICATED_PARTITIONS` partitions for now.

Functions of a started ``KazooClient``; no state; callable from any thread.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from rill.broker.cluster.partition_states import create_replicated_topic
from rill.broker.cluster.replica_assignment import assign_replicas
from rill.client.errors import InvalidPartitions
from rill.client.topic_names import validate_topic
from rill.client.zookeeper.registry import IDS_PATH, ClusterSnapshot
from rill.client.zookeeper.replica_layout import (CONTROLLER_EPOCH_PATH, PartitionState, TopicReplicas,
                                                  decode_controller_epoch)

__all__ = ["MAX_REPLICATED_PARTITIONS", "create_topic", "read_broker_epoch", "replica_brokers"]

MAX_REPLICATED_PARTITIONS = 3_000


def create_topic(zk: KazooClient, topic: str, partitions: int, replication_factor: int,
                 config: Mapping[str, str] | None, live_brokers: Collection[int], *,
                 rng: random.Random | None = None) -> TopicReplicas:
    """Create the replicated topic ``topic`` with its initial partition states.

    Args:
        config: the topic's settings as strings (e.g. ``{"min.insync.replicas": "2"}``), or None.
        live_brokers: the ids to assign replicas over (the live brokers).
        rng: the assignment's random start and shift (a fresh ``random.Random()`` when None).

    Returns:
        The assignment written (``replicas[p]``: partition p's replicas, leader first).

    Raises:
        InvalidTopic: an illegal name.
        InvalidPartitions: ``partitions`` outside 1..MAX_REPLICATED_PARTITIONS.
        InvalidReplicationFactor: a factor below 1 or above ``len(live_brokers)``.
        TopicExists: the topic exists (replicated or 0.7).
        ValueError: a config entry is not a string to a string, or ``/rill/controller_epoch`` is malformed.
        KazooException: from ZooKeeper (the outcome is unknown: read the topic).
    """
    validate_topic(topic)
    if not 1 <= partitions <= MAX_REPLICATED_PARTITIONS:
        raise InvalidPartitions(f"a replicated topic has 1..{MAX_REPLICATED_PARTITIONS} partitions, not {partitions} "
                                "(one ZooKeeper transaction holds them all)")
    assignment = assign_replicas(sorted(live_brokers), partitions, replication_factor, rng=rng)
    replicas = TopicReplicas(tuple(assignment), dict(config or {}))
    epoch = current_controller_epoch(zk)
    states = {p: PartitionState(r[0], 0, r, epoch) for p, r in enumerate(replicas.replicas)}
    create_replicated_topic(zk, topic, replicas, states, None)
    return replicas


def replica_brokers(snapshot: ClusterSnapshot) -> list[int]:
    """The live brokers that can hold replicas (they serve gRPC, so the controller can reach them), sorted."""
    return sorted(b.broker_id for b in snapshot.brokers.values() if b.grpc_port > 0)


def current_controller_epoch(zk: KazooClient) -> int:
    """``/rill/controller_epoch``'s value; 0 when it does not exist. Raises ValueError if malformed."""
    try:
        data, _ = zk.get(CONTROLLER_EPOCH_PATH)
    except NoNodeError:
        return 0
    return decode_controller_epoch(data)


def read_broker_epoch(zk: KazooClient, broker_id: int) -> int | None:
    """The broker epoch: the czxid of ``/brokers/ids/[broker_id]`` (Kafka's KIP-380); None when unregistered.

    A broker registering anew (new session) gets a new, higher czxid, so a request carrying
    an older one comes from an earlier life of that id.
    """
    stat = zk.exists(f"{IDS_PATH}/{broker_id}")
    return None if stat is None else int(stat.czxid)
