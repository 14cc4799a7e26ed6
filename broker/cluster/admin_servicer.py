"""The Admin gRPC servicer: topics, the cluster, and groups described with their lag.

Lag of a partition is given in bytes (log end minus committed offset; from the log
start when nothing is committed) and in seconds: how long ago the oldest unconsumed
message was appended, from the time index (so to within one index interval, and
never under-stated), 0 when the consumer is caught up.
"""

from __future__ import annotations

import time
from typing import Any

import grpc
import structlog

from rill.broker.cluster.cluster_view import ClusterView
from rill.broker.cluster.log_catalog import LogCatalog
from rill.broker.log.manager import LogManager
from rill.client.errors import BrokerError, InvalidPartitions, InvalidTopic, PartitionLimitReached, StorageError
from rill.client.protocol import requests as rq
from rill.v1 import admin_pb2 as apb
from rill.v1 import admin_pb2_grpc as apb_grpc
from rill.v1 import coordinator_pb2 as pb

log = structlog.get_logger(__name__)

_CREATE_TOPIC_CODES: dict[type[BrokerError], pb.ErrorCode] = {
    InvalidTopic: pb.INVALID_TOPIC,
    InvalidPartitions: pb.INVALID_PARTITIONS,
    PartitionLimitReached: pb.PARTITION_LIMIT_REACHED,
    StorageError: pb.STORAGE_ERROR,
}


class AdminServicer(apb_grpc.AdminServicer):
    def __init__(self, logs: LogManager, coordinator: Any, broker: pb.Broker,
                 cluster: ClusterView | None = None) -> None:
        self.logs = logs
        self.coordinator = coordinator
        self.broker = broker
        self.cluster = cluster or ClusterView(logs, lambda: rq.BrokerInfo(broker.broker_id, broker.host, broker.port,
                                                                          broker.grpc_port))
        self.catalog = LogCatalog(logs, self.cluster)

    # ---------------------------------------------------------------- topics

    def _describe_topic(self, topic: str, details: bool = True) -> apb.TopicDescription:
        """The topic cluster-wide; offsets of partitions on other brokers are asked of them (-1: no answer)."""
        placed = self.cluster.placement(topic)
        if placed is None:
            return apb.TopicDescription(topic=topic, error_code=pb.UNKNOWN_TOPIC_OR_PARTITION)
        desc = apb.TopicDescription(topic=topic, partition_count=len(placed))
        if not details:
            return desc
        me = self.broker.broker_id
        for p, (leader, number) in enumerate(zip(placed.leaders, placed.broker_partitions)):
            row = desc.partitions.add(partition=p, leader=leader, broker_partition=number,
                                      start_offset=-1, end_offset=-1)
            if leader == me:
                plog = self.logs.get(topic, number)
                row.start_offset, row.end_offset, row.size_bytes = plog.start_offset, plog.end_offset, plog.size_bytes
            elif leader != rq.NO_LEADER:
                try:
                    row.start_offset, row.end_offset = self.catalog.offset_range(topic, p)
                    row.size_bytes = row.end_offset - row.start_offset  # offsets are byte positions
                except KeyError as exc:
                    log.warning("admin.remote_offsets_failed", topic=topic, partition=p, error=str(exc))
        return desc

    def CreateTopic(self, request: apb.CreateTopicRequest, context: grpc.ServicerContext) -> apb.CreateTopicResponse:
        """Create a topic (the same limits as the data plane's CREATE_TOPIC: the log manager checks both)."""
        try:
            self.logs.create_topic(request.topic, request.partitions)
        except BrokerError as exc:
            return apb.CreateTopicResponse(error_code=_CREATE_TOPIC_CODES.get(type(exc), pb.INVALID_REQUEST),
                                           error_message=str(exc))
        return apb.CreateTopicResponse(topic=self._describe_topic(request.topic))

    def ListTopics(self, request: apb.ListTopicsRequest, context: grpc.ServicerContext) -> apb.ListTopicsResponse:
        return apb.ListTopicsResponse(topics=[self._describe_topic(t, details=False)
                                              for t in self.cluster.topic_names()])

    def DescribeTopics(self, request: apb.DescribeTopicsRequest,
                       context: grpc.ServicerContext) -> apb.DescribeTopicsResponse:
        names = list(request.topics) or self.cluster.topic_names()
        return apb.DescribeTopicsResponse(topics=[self._describe_topic(t) for t in names])

    # ---------------------------------------------------------------- cluster

    def DescribeCluster(self, request: apb.DescribeClusterRequest,
                        context: grpc.ServicerContext) -> apb.DescribeClusterResponse:
        listing, _ = self.coordinator.list_groups(pb.ListGroupsRequest())
        brokers = [pb.Broker(broker_id=b.broker_id, host=b.host, port=b.port, grpc_port=b.grpc_port)
                   for b in self.cluster.brokers()]
        return apb.DescribeClusterResponse(
            brokers=brokers, controller_broker_id=self.broker.broker_id,
            coordinators=[apb.GroupCoordinatorAssignment(consumer_group=g.group_name,
                                                         coordinator_broker_id=g.controller_broker.broker_id)
                          for g in listing.groups_info])

    # ---------------------------------------------------------------- groups

    def DescribeGroup(self, request: apb.DescribeGroupRequest,
                      context: grpc.ServicerContext) -> apb.DescribeGroupResponse:
        described = self.coordinator.describe(request.consumer_group)
        if described is None:
            return apb.DescribeGroupResponse(consumer_group=request.consumer_group, error_code=pb.GROUP_NOT_FOUND)
        response = apb.DescribeGroupResponse(
            consumer_group=request.consumer_group, state=described.state, generation=described.generation,
            assignment_strategy=described.strategy, ephemeral=described.ephemeral,
            session_timeout=described.session_timeout_ms, topics=sorted(described.topics),
            coordinator=self.broker)
        owners: dict[tuple[str, int], str] = {}
        for member in described.members:
            response.members.add(
                consumer_id=member.consumer_id, client_id=member.client_id, topics=sorted(member.topics),
                assignment=[pb.TopicPartition(topic=t, partition=p) for t, p in member.assignment],
                static_partitions=[pb.TopicPartition(topic=t, partition=p) for t, p in member.static_partitions],
                last_heartbeat_ms=int(member.last_heartbeat * 1000))
            owners.update({tp: member.consumer_id for tp in member.assignment})
        for topic, partition in self._group_partitions(described, owners):
            response.partitions.append(self._lag(topic, partition, described.offsets.get((topic, partition), -1),
                                                 owners.get((topic, partition), "")))
        return response

    def _group_partitions(self, described: Any, owners: dict[tuple[str, int], str]) -> list[tuple[str, int]]:
        topics = set(described.topics) | {t for m in described.members for t in m.topics}
        wanted = set(owners) | set(described.offsets)
        counts = self.catalog.topics()
        for topic in topics:
            wanted.update((topic, p) for p in range(counts.get(topic, 0)))
        return sorted(wanted)

    def _lag(self, topic: str, partition: int, committed: int, owner: str) -> apb.PartitionLag:
        """Lag in bytes, and in seconds from the partition's time index (asked of its broker in a cluster)."""
        try:
            position, end, appended = self.catalog.lag_point(topic, partition, committed)
        except (BrokerError, KeyError):  # gone, or its broker is not alive: the end and the lag are unknown
            return apb.PartitionLag(topic=topic, partition=partition, committed_offset=committed, owner=owner,
                                    end_offset=-1, lag_bytes=-1, lag_seconds=-1)
        seconds = max(0.0, time.time() - appended / 1000) if appended is not None else 0.0
        return apb.PartitionLag(topic=topic, partition=partition, committed_offset=committed, end_offset=end,
                                lag_bytes=max(0, end - position), lag_seconds=round(seconds, 3), owner=owner)
