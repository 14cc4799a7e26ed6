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

from rill.broker.log.manager import LogManager
from rill.client.errors import BrokerError, InvalidTopic
from rill.v1 import admin_pb2 as apb
from rill.v1 import admin_pb2_grpc as apb_grpc
from rill.v1 import coordinator_pb2 as pb

log = structlog.get_logger(__name__)


class AdminServicer(apb_grpc.AdminServicer):
    def __init__(self, logs: LogManager, coordinator: Any, broker: pb.Broker) -> None:
        self.logs = logs
        self.coordinator = coordinator
        self.broker = broker

    # ---------------------------------------------------------------- topics

    def _describe_topic(self, topic: str, details: bool = True) -> apb.TopicDescription:
        count = self.logs.topics().get(topic)
        if count is None:
            return apb.TopicDescription(topic=topic, error_code=pb.UNKNOWN_TOPIC_OR_PARTITION)
        desc = apb.TopicDescription(topic=topic, partition_count=count)
        if details:
            for p in range(count):
                plog = self.logs.get(topic, p)
                desc.partitions.add(partition=p, start_offset=plog.start_offset, end_offset=plog.end_offset,
                                    size_bytes=plog.size_bytes, leader=self.broker.broker_id)
        return desc

    def CreateTopic(self, request: apb.CreateTopicRequest, context: grpc.ServicerContext) -> apb.CreateTopicResponse:
        try:
            self.logs.create_topic(request.topic, request.partitions)
        except InvalidTopic as exc:
            return apb.CreateTopicResponse(error_code=pb.INVALID_TOPIC, error_message=str(exc))
        except BrokerError as exc:
            return apb.CreateTopicResponse(error_code=pb.INVALID_REQUEST, error_message=str(exc))
        return apb.CreateTopicResponse(topic=self._describe_topic(request.topic))

    def ListTopics(self, request: apb.ListTopicsRequest, context: grpc.ServicerContext) -> apb.ListTopicsResponse:
        return apb.ListTopicsResponse(topics=[self._describe_topic(t, details=False)
                                              for t in sorted(self.logs.topics())])

    def DescribeTopics(self, request: apb.DescribeTopicsRequest,
                       context: grpc.ServicerContext) -> apb.DescribeTopicsResponse:
        names = list(request.topics) or sorted(self.logs.topics())
        return apb.DescribeTopicsResponse(topics=[self._describe_topic(t) for t in names])

    # ---------------------------------------------------------------- cluster

    def DescribeCluster(self, request: apb.DescribeClusterRequest,
                        context: grpc.ServicerContext) -> apb.DescribeClusterResponse:
        listing, _ = self.coordinator.list_groups(pb.ListGroupsRequest())
        return apb.DescribeClusterResponse(
            brokers=[self.broker], controller_broker_id=self.broker.broker_id,
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
        for topic in topics:
            wanted.update((topic, p) for p in range(self.logs.topics().get(topic, 0)))
        return sorted(wanted)

    def _lag(self, topic: str, partition: int, committed: int, owner: str) -> apb.PartitionLag:
        try:
            plog = self.logs.get(topic, partition)
        except BrokerError:
            return apb.PartitionLag(topic=topic, partition=partition, committed_offset=committed, owner=owner)
        end = plog.end_offset
        position = committed if committed >= 0 else plog.start_offset
        position = max(position, plog.start_offset)
        appended = plog.append_time_ms(position)
        seconds = max(0.0, time.time() - appended / 1000) if appended is not None else 0.0
        return apb.PartitionLag(topic=topic, partition=partition, committed_offset=committed, end_offset=end,
                                lag_bytes=max(0, end - position), lag_seconds=round(seconds, 3), owner=owner)
