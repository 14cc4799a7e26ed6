"""Value types shared by every part of rill: the client, the coordinator and the broker.

Each is defined once, here (aiokafka's ``structs.py`` is the model). The wire and gRPC
shapes of the same facts stay where their codecs are: a broker in METADATA is
rill.client.protocol.requests' ``BrokerInfo`` (id, host, port, gRPC port) and over gRPC
it is the protobuf ``rill.v1.coordinator_pb2.Broker``; both carry an :data:`Address`.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Address", "OffsetAndTimestamp", "RecordMetadata", "TopicPartition"]

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


class OffsetAndTimestamp(NamedTuple):
    """Where to start reading a partition for a time (kafka-python's ``OffsetAndTimestamp``).

    The answer of ``Consumer.offsets_for_times``. The Kafka 0.7 message format has no
    timestamps: times are the broker's append times, from its sparse time index.

    Attributes:
        offset: a message boundary (byte position) at or before the first message appended
            at or after the time asked, at most one time-index interval before it (a
            Kafka 0.7 broker answers to a whole segment); nothing appended at or after
            that time is before it.
        timestamp: when the message at ``offset`` was appended (ms since the epoch), to
            within ``log.index.interval.ms`` and never later than it was; it may be
            before the time asked, by up to one index interval.
    """

    offset: int
    timestamp: int


class RecordMetadata(NamedTuple):
    """Where a sent message was stored (kafka-python's ``RecordMetadata``): ``SendResponse.get()``'s answer.

    Attributes:
        topic: the topic.
        partition: the partition it was appended to.
        offset: its offset (a byte position; -1 with ``acks=none``, which learns none).
    """

    topic: str
    partition: int
    offset: int

