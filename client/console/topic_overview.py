"""The topics page and a topic's page: partitions with their leader, replicas, ISR, offsets, size and append rate.

Everything but the rate comes from Admin DescribeTopics (what ``rill topics describe``
prints); the rate from the lag sampler's end offsets (rill.client.console.lag_sampler).
A partition whose leader is not alive is **offline** (its offsets are then unknown, -1);
a replicated one whose ISR is smaller than its replicas is **under-replicated**.

The topics the console's principal may not describe are left out of the list by the
brokers; naming one (a topic's page) is refused (TopicAuthorizationFailed), and the
page says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from rill.client.console.cluster_access import ClusterAccess
from rill.client.console.console_errors import NotFound
from rill.client.console.lag_sampler import LagSampler
from rill.client.errors import RillError, TopicAuthorizationFailed
from rill.client.grpc_client import error_name
from rill.client.protocol import requests as rq
from rill.v1 import admin_pb2 as apb
from rill.v1 import coordinator_pb2 as pb

__all__ = ["PartitionRow", "TopicRow", "TopicView", "topic_view", "topics_view"]


@dataclass(frozen=True)
class PartitionRow:
    """One partition. Offsets are byte positions; -1 where unknown (offline). ``replicas`` and ``isr`` are empty
    for a Kafka 0.7-style partition (one copy, on its leader); ``rate`` is bytes/s (None: not sampled yet)."""

    partition: int
    leader: int                   # broker id; -1: no live leader
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader_epoch: int
    under_replicated: bool
    start_offset: int
    end_offset: int
    size_bytes: int
    rate: float | None

    @property
    def offline(self) -> bool:
        return self.leader == rq.NO_LEADER


@dataclass(frozen=True)
class TopicRow:
    """A topic in the list: partition count, replication, totals of its partitions and how many are unwell."""

    name: str
    partitions: int
    replication_factor: int
    size_bytes: int
    rate: float | None
    offline: int
    under_replicated: int
    internal: bool                # rill's own (``__rill_groups``): read-only to clients


@dataclass(frozen=True)
class TopicView:
    """A topic's page."""

    name: str
    replication_factor: int
    replicated: bool
    config: dict[str, str]
    partitions: tuple[PartitionRow, ...]

    @property
    def offline(self) -> int:
        return sum(p.offline for p in self.partitions)


def topics_view(access: ClusterAccess, sampler: LagSampler) -> tuple[TopicRow, ...]:
    """Every topic the console may describe, by name. Raises RillError (unreachable, refused) as the call does."""
    topics = access.admin_call(lambda admin: admin.describe_topics()).topics
    return tuple(_row(t, sampler) for t in sorted(topics, key=lambda t: t.topic) if not t.error_code)


def topic_view(access: ClusterAccess, sampler: LagSampler, topic: str) -> TopicView:
    """The topic's page.

    Raises:
        NotFound: no such topic. TopicAuthorizationFailed: the ACLs refuse it. RillError: the call failed.
    """
    found = access.admin_call(lambda admin: admin.describe_topics([topic])).topics
    described = next((t for t in found if t.topic == topic), None)
    if described is None or described.error_code == pb.UNKNOWN_TOPIC_OR_PARTITION:
        raise NotFound(f"topic {topic!r} does not exist")
    if described.error_code == pb.TOPIC_AUTHORIZATION_FAILED:
        raise TopicAuthorizationFailed(f"may not describe topic {topic!r}")
    if described.error_code:
        raise RillError(f"topic {topic!r}: {error_name(described.error_code)}")
    rows = tuple(_partition(topic, p, sampler) for p in sorted(described.partitions, key=lambda p: p.partition))
    return TopicView(topic, described.replication_factor or 1, any(p.replicas for p in rows), dict(described.config),
                     rows)


def _partition(topic: str, p: apb.PartitionDescription, sampler: LagSampler) -> PartitionRow:
    return PartitionRow(p.partition, p.leader, tuple(p.replicas), tuple(p.isr), p.leader_epoch, p.under_replicated,
                        p.start_offset, p.end_offset, p.size_bytes, sampler.append_rate(topic, p.partition))


def _row(t: apb.TopicDescription, sampler: LagSampler) -> TopicRow:
    parts = list(t.partitions)
    return TopicRow(t.topic, t.partition_count or len(parts), t.replication_factor or 1,
                    sum(p.size_bytes for p in parts if p.size_bytes > 0),
                    sampler.topic_rate(t.topic, [p.partition for p in parts]),
                    sum(p.leader == rq.NO_LEADER for p in parts), sum(p.under_replicated for p in parts),
                    t.topic.startswith("__"))
