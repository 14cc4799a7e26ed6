"""The base of the Consumer's groups of calls: the parts they share and the guards of every call.

:class:`~rill.client.consumer.consumer.Consumer` is assembled from groups of public
calls, one module each (:mod:`~rill.client.consumer.subscription_calls`,
:mod:`~rill.client.consumer.positions`, :mod:`~rill.client.consumer.group_offsets`,
:mod:`~rill.client.consumer.iteration`, and the facade itself for poll, metrics and
close). Each group subclasses :class:`ConsumerCalls`, which names
the parts ``Consumer.__init__`` builds and provides the checks every call starts
with: the consumer is open, it has a group, the partition is owned.

Not thread-safe: see :class:`~rill.client.consumer.consumer.Consumer`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from rill.client.consumer.consumer_snapshot import EndOffsets
from rill.client.consumer.errors import IllegalStateError
from rill.client.consumer.fetcher import Fetcher
from rill.client.consumer.group_client import GroupClient
from rill.client.consumer.metadata_refresh import MetadataRefresh
from rill.client.consumer.offset_fetcher import OffsetFetcher
from rill.client.consumer.subscription import SubscriptionState, TopicPartition
from rill.client.cluster_metadata import ClusterMetadata

PartitionLike = tuple[str, int]


class ConsumerCalls:
    """The parts shared by the Consumer's calls (set by ``Consumer.__init__``) and their guards."""

    config: dict[str, Any]
    _clock: Callable[[], float]
    _subscription: SubscriptionState
    _metadata: ClusterMetadata
    _fetcher: Fetcher
    _offsets: OffsetFetcher
    _refresh: MetadataRefresh
    _group: GroupClient | None
    _ends: EndOffsets
    _closed: bool

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed")

    def _require_group(self, what: str) -> GroupClient:
        if self._group is None:
            raise IllegalStateError(f"{what} needs a group.id (this consumer has none: it reads what it subscribes "
                                    "to or is assigned, from positions it keeps itself, and commits nothing)")
        return self._group

    def _owned(self, partition: PartitionLike) -> TopicPartition:
        tp = to_tp(partition)
        if tp not in self._subscription.assignment:
            raise IllegalStateError(f"{tp.topic}-{tp.partition} is not assigned to this consumer "
                                    f"(assigned: {partition_names(self._subscription.assignment)})")
        return tp


def to_tp(partition: PartitionLike) -> TopicPartition:
    topic, number = partition
    return TopicPartition(topic, number)


def partition_names(partitions: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(partitions)) or "none"
