"""Value types shared by every part of rill: the client, the coordinator and the broker.

Each is defined once, here (aiokafka's ``structs.py`` is the model). The wire and gRPC
shapes of the same facts stay where their codecs are: a broker in METADATA is
rill.client.protocol.requests' ``BrokerInfo`` (id, host, port, gRPC port) and over gRPC
it is the protobuf ``rill.v1.coordinator_pb2.Broker``; both carry an :data:`Address`.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Address", "TopicPartition"]

Address = tuple[str, int]
"""Where a broker listens: ``(host, port)``; the host a name or a literal IPv4/IPv6 address."""


class TopicPartition(NamedTuple):
    """A partition of a topic (kafka-python's and Kafka's ``TopicPartition``).

    A plain ``(topic, partition)`` tuple compares and hashes equal to it, so either may
    key a dict.

    Attributes:
        topic: the topic's name.
        partition: the partition's number (cluster-wide in a cluster: see docs/cluster.md).
    """

    topic: str
    partition: int
