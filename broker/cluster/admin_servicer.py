"""The Admin gRPC servicer: topics, the cluster, and groups described with their lag.

Lag of a partition is given in bytes (log end minus committed offset; from the log
start when nothing is committed) and in seconds: how long ago the oldest unconsumed
message was appended, from the time index (so to within one index interval, and
never under-stated), 0 when the consumer is caught up.

Topics are of two kinds. A Kafka 0.7-style topic (replication factor 1) is created in
this broker's storage, as the data plane's CREATE_TOPIC does. A replicated topic
(factor > 1, issue 13) is created in ZooKeeper (``replicated_topics.create_topic``)
over the live brokers, once the broker has joined its cluster
(:meth:`AdminServicer.attach_zookeeper`); the controller then gives its partitions
their leaders. Describing a replicated topic reads its assignment and partition
states from ZooKeeper and its offsets from each partition's leader.

AlterTopicConfig changes a replicated topic's settings in ZooKeeper
(``topic_config.alter_topic_config``, a conditional write); the controller sees the
node change and tells the brokers.

ElectLeaders (preferred leader election) is the controller's: ``elect_leaders`` hands it
over, or answers NOT_CONTROLLER naming the controller. So are the reassignment RPCs
(``reassign_partitions``) and CreatePartitions (``create_partitions``). DeleteTopic
(``delete_topic``) marks a replicated topic for deletion from any broker, or deletes
this broker's partitions of a 0.7-style topic.

Thread-safety: every method may run on any gRPC worker thread at once; the
ZooKeeper session and registry are set once, before or while requests arrive.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import grpc
import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError

from rill.broker.cluster.cluster_view import ClusterView
from rill.broker.cluster.create_partitions import PartitionGrower, create_partitions
from rill.broker.cluster.delete_topic import delete_topic
from rill.broker.cluster.elect_leaders import PreferredElector, elect_leaders
from rill.broker.cluster.log_catalog import REMOTE_TIMEOUT_S, LogCatalog
from rill.broker.cluster.partition_states import TopicExists, read_states, read_topic
from rill.broker.cluster.reassign_partitions import (Reassigner, alter_reassignments, alter_throttle,
                                                    list_reassignments)
from rill.broker.cluster.replicated_topics import create_topic as create_replicated_topic
from rill.broker.cluster.replicated_topics import replica_brokers
from rill.broker.cluster.topic_config import (InvalidTopicConfig, NotReplicatedTopic, alter_topic_config,
                                              topic_config_problem)
from rill.broker.log.manager import LogManager
from rill.client.errors import (BrokerError, ConnectionClosed, InvalidPartitions, InvalidReplicationFactor,
                                InvalidTopic, PartitionLimitReached, RillError, StorageError)
from rill.client.protocol import requests as rq
from rill.client.simple import SimpleConsumer
from rill.client.zookeeper.registry import RILL_TOPICS_PATH, RegistryView
from rill.client.zookeeper.replica_layout import TopicReplicas, is_replicated_topic_value
from rill.coordinator.describe import group_partitions
from rill.coordinator.grpc_auth import caller
from rill.client.topic_names import is_internal_topic
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

_REPLICATED_CREATE_CODES: tuple[tuple[type[Exception], pb.ErrorCode], ...] = (
    (InvalidReplicationFactor, pb.INVALID_REPLICATION_FACTOR),  # replica_assignment's is a subclass
    (TopicExists, pb.TOPIC_ALREADY_EXISTS),
    (InvalidPartitions, pb.INVALID_PARTITIONS),
    (InvalidTopic, pb.INVALID_TOPIC),
)

_ALTER_CODES: tuple[tuple[type[Exception], pb.ErrorCode], ...] = (
    (InvalidTopicConfig, pb.INVALID_CONFIG),
    (NotReplicatedTopic, pb.UNKNOWN_TOPIC_OR_PARTITION),
    (InvalidTopic, pb.INVALID_TOPIC),
)


class AdminServicer(apb_grpc.AdminServicer):
    """The Admin service of one broker (alone, or one of a cluster once :meth:`attach_zookeeper` ran).

    Args:
        default_replication_factor: the factor of a CreateTopic that gives none
            (``default.replication.factor``).
    """

    def __init__(self, logs: LogManager, coordinator: Any, broker: pb.Broker,
                 cluster: ClusterView | None = None, *, default_replication_factor: int = 1) -> None:
        self.logs = logs
        self.coordinator = coordinator
        self.broker = broker
        self.cluster = cluster or ClusterView(logs, lambda: rq.BrokerInfo(broker.broker_id, broker.host, broker.port,
                                                                          broker.grpc_port))
        self.catalog = LogCatalog(logs, self.cluster)
        self.reserve_partitions: Callable[[str, int], str | None] | None = None
        """The partition cap (rill.broker.security.partition_cap): counts a caller's new partitions, or refuses."""
        self.default_replication_factor = default_replication_factor
        self.zk: KazooClient | None = None
        self.registry: RegistryView | None = None
        self.elector: PreferredElector | None = None
        self.reassigner: Reassigner | None = None
        self.grower: PartitionGrower | None = None
        self.delete_topic_enable = True
        """``delete.topic.enable``: DeleteTopic deletes (else TOPIC_DELETION_DISABLED)."""

    def attach_zookeeper(self, zk: KazooClient, registry: RegistryView,
                         elector: PreferredElector | None = None) -> None:
        """Create and describe replicated topics through the broker's ZooKeeper session and registry;
        ElectLeaders through ``elector`` (the broker's controller role)."""
        self.zk, self.registry, self.elector = zk, registry, elector

    def ElectLeaders(self, request: apb.ElectLeadersRequest, context: grpc.ServicerContext) -> apb.ElectLeadersResponse:
        """Preferred leader election, by the controller only (``elect_leaders``: NOT_CONTROLLER elsewhere)."""
        return elect_leaders(request, self.elector, self.registry)

    def AlterTopicConfig(self, request: apb.AlterTopicConfigRequest,
                         context: grpc.ServicerContext) -> apb.AlterTopicConfigResponse:
        """Set and delete a replicated topic's settings (``topic_config.alter_topic_config``)."""
        if self.zk is None:
            return apb.AlterTopicConfigResponse(error_code=pb.UNKNOWN_TOPIC_OR_PARTITION, error_message=(
                f"topic {request.topic}: this broker is not in a cluster, and only replicated topics have settings"))
        try:
            change = alter_topic_config(self.zk, request.topic, dict(request.set_config), list(request.delete_config))
        except (InvalidTopicConfig, NotReplicatedTopic, InvalidTopic) as exc:
            code = next(c for kind, c in _ALTER_CODES if isinstance(exc, kind))
            return apb.AlterTopicConfigResponse(error_code=code, error_message=str(exc))
        except (KazooException, TimeoutError, ValueError) as exc:
            log.warning("admin.alter_topic_config_failed", topic=request.topic, error=repr(exc))
            return apb.AlterTopicConfigResponse(error_code=pb.UNKNOWN, error_message=(
                f"topic {request.topic}: the settings may or may not have changed ({exc}); describe it"))
        return apb.AlterTopicConfigResponse(previous=dict(change.before), config=dict(change.after))

    # ---------------------------------------------------------------- reassignment (reassign_partitions.py)

    def attach_reassigner(self, reassigner: Reassigner, grower: PartitionGrower | None = None) -> None:
        """Answer the reassignment RPCs through ``reassigner``, CreatePartitions through ``grower`` (the broker's
        controller role)."""
        self.reassigner, self.grower = reassigner, grower

    def DeleteTopic(self, request: apb.DeleteTopicRequest, context: grpc.ServicerContext) -> apb.DeleteTopicResponse:
        """Delete a topic (``delete_topic``): a replicated one cluster-wide, a 0.7-style one's partitions here."""
        return delete_topic(request, self.logs, self.zk, enabled=self.delete_topic_enable)

    def CreatePartitions(self, request: apb.CreatePartitionsRequest,
                         context: grpc.ServicerContext) -> apb.CreatePartitionsResponse:
        """Add partitions to a replicated topic, by the controller only (NOT_CONTROLLER elsewhere); the caller's
        partition cap (partitions_created_max) counts the new ones."""
        current = self.cluster.partition_counts().get(request.topic, 0) if self.cluster.clustered else 0
        refusal = self._reserve(request.count - current) if request.count > current else None
        if refusal is not None:
            return apb.CreatePartitionsResponse(error_code=pb.PARTITION_LIMIT_REACHED, error_message=refusal)
        return create_partitions(request, self.grower, self.registry)

    def AlterPartitionReassignments(self, request: apb.AlterPartitionReassignmentsRequest,
                                    context: grpc.ServicerContext) -> apb.AlterPartitionReassignmentsResponse:
        """Move partitions to other brokers, by the controller only (NOT_CONTROLLER elsewhere)."""
        return alter_reassignments(request, self.reassigner, self.registry)

    def ListPartitionReassignments(self, request: apb.ListPartitionReassignmentsRequest,
                                   context: grpc.ServicerContext) -> apb.ListPartitionReassignmentsResponse:
        """The moves under way and the replication throttle, from the controller (NOT_CONTROLLER elsewhere)."""
        return list_reassignments(request, self.reassigner, self.registry)

    def AlterReplicationThrottle(self, request: apb.AlterReplicationThrottleRequest,
                                 context: grpc.ServicerContext) -> apb.AlterReplicationThrottleResponse:
        """Set or remove the throttle on replicas being added, by the controller (NOT_CONTROLLER elsewhere)."""
        return alter_throttle(request, self.reassigner, self.registry)

    # ---------------------------------------------------------------- topics

    def _describe_topic(self, topic: str, details: bool = True) -> apb.TopicDescription:
        """The topic cluster-wide; offsets of partitions on other brokers are asked of them (-1: no answer)."""
        placed = self.cluster.placement(topic)
        if placed is None:
            return apb.TopicDescription(topic=topic, error_code=pb.UNKNOWN_TOPIC_OR_PARTITION)
        desc = apb.TopicDescription(topic=topic, partition_count=len(placed), replication_factor=1)
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

    def _reserve(self, partitions: int) -> str | None:
        """The caller's partition cap for ``partitions`` new ones: None, or why it refuses them."""
        if self.reserve_partitions is None or partitions <= 0:
            return None
        return self.reserve_partitions(caller()[0], partitions)

    def CreateTopic(self, request: apb.CreateTopicRequest, context: grpc.ServicerContext) -> apb.CreateTopicResponse:
        """Create a topic: factor 1 in this broker's storage (the limits of the data plane's CREATE_TOPIC),
        a larger one in ZooKeeper over the live brokers (INVALID_REPLICATION_FACTOR without ZooKeeper)."""
        if is_internal_topic(request.topic):
            return apb.CreateTopicResponse(error_code=pb.INVALID_TOPIC, error_message=f"topic {request.topic!r} is "
                                           "internal to rill (names beginning with '__rill' are reserved)")
        factor = request.replication_factor or self.default_replication_factor
        problem = topic_config_problem(request.config, factor)
        if problem is not None:
            return apb.CreateTopicResponse(error_code=pb.INVALID_CONFIG, error_message=problem)
        refusal = self._reserve(request.partitions) if request.topic not in self.catalog.topics() else None
        if refusal is not None:
            return apb.CreateTopicResponse(error_code=pb.PARTITION_LIMIT_REACHED, error_message=refusal)
        if factor != 1:
            return self._create_replicated(request, factor)
        try:
            self.logs.create_topic(request.topic, request.partitions)
        except BrokerError as exc:
            return apb.CreateTopicResponse(error_code=_CREATE_TOPIC_CODES.get(type(exc), pb.INVALID_REQUEST),
                                           error_message=str(exc))
        return apb.CreateTopicResponse(topic=self._describe_topic(request.topic))

    def _create_replicated(self, request: apb.CreateTopicRequest, factor: int) -> apb.CreateTopicResponse:
        """``replicated_topics.create_topic`` over the live brokers that serve gRPC (they can hold replicas)."""
        zk, registry = self.zk, self.registry
        if factor < 1:
            return apb.CreateTopicResponse(error_code=pb.INVALID_REPLICATION_FACTOR,
                                           error_message=f"replication factor must be larger than 0, not {factor}")
        if zk is None or registry is None:
            return apb.CreateTopicResponse(
                error_code=pb.INVALID_REPLICATION_FACTOR,
                error_message=f"replication factor {factor} larger than available brokers 1 "
                              "(this broker is not in a cluster: set zookeeper.connect to replicate)")
        live = replica_brokers(registry.snapshot)
        try:
            create_replicated_topic(zk, request.topic, request.partitions, factor, dict(request.config), live)
        except (BrokerError, TopicExists) as exc:
            code = next((c for kind, c in _REPLICATED_CREATE_CODES if isinstance(exc, kind)), pb.INVALID_REQUEST)
            return apb.CreateTopicResponse(error_code=code, error_message=str(exc))
        except KazooException as exc:
            log.warning("admin.create_topic_unknown_outcome", topic=request.topic, error=repr(exc))
            return apb.CreateTopicResponse(error_code=pb.UNKNOWN, error_message=(
                f"ZooKeeper failed while creating topic {request.topic} ({exc!r}): it may or may not exist; "
                "describe it"))
        log.info("admin.replicated_topic_created", topic=request.topic, partitions=request.partitions,
                 replication_factor=factor, brokers=live, config=dict(request.config))
        replicas = read_topic(zk, request.topic)
        if replicas is None:  # deleted at once by someone else
            return apb.CreateTopicResponse(topic=apb.TopicDescription(topic=request.topic,
                                                                      error_code=pb.UNKNOWN_TOPIC_OR_PARTITION))
        return apb.CreateTopicResponse(topic=self._describe_replicated(request.topic, replicas))

    def ListTopics(self, request: apb.ListTopicsRequest, context: grpc.ServicerContext) -> apb.ListTopicsResponse:
        replicated = self._replicated_topics()
        names = sorted(set(self.cluster.topic_names()) | set(replicated))
        return apb.ListTopicsResponse(topics=[
            apb.TopicDescription(topic=t, partition_count=replicated[t].partitions,
                                 replication_factor=replicated[t].replication_factor)
            if t in replicated else self._describe_topic(t, details=False) for t in names])

    def DescribeTopics(self, request: apb.DescribeTopicsRequest,
                       context: grpc.ServicerContext) -> apb.DescribeTopicsResponse:
        """Every topic (or those named), each partition with its replicas, ISR and leader epoch when replicated.

        Raises:
            KazooException: ZooKeeper failed (the call fails with gRPC's UNKNOWN status).
        """
        if request.topics:
            described = [self._describe_named(t) for t in request.topics]
        else:
            replicated = self._replicated_topics()
            described = [self._describe_replicated(t, replicated[t]) if t in replicated else self._describe_topic(t)
                         for t in sorted(set(self.cluster.topic_names()) | set(replicated))]
        if request.under_replicated_only:
            described = [_under_replicated(d) for d in described if d.error_code or
                         any(p.under_replicated for p in d.partitions)]
        return apb.DescribeTopicsResponse(topics=described)

    def _describe_named(self, topic: str) -> apb.TopicDescription:
        """A named topic: replicated when ZooKeeper says so, else 0.7-style (or unknown)."""
        if self.zk is not None:
            try:
                replicas = read_topic(self.zk, topic)
            except ValueError as exc:
                log.warning("admin.bad_replicated_topic", topic=topic, error=str(exc))
                return apb.TopicDescription(topic=topic, error_code=pb.UNKNOWN)
            if replicas is not None:
                return self._describe_replicated(topic, replicas)
        return self._describe_topic(topic)

    def _replicated_topics(self) -> dict[str, TopicReplicas]:
        """Every replicated topic in ZooKeeper's ``/rill/topics`` ({} without ZooKeeper); malformed ones are logged."""
        zk = self.zk
        if zk is None:
            return {}
        try:
            children = zk.get_children(RILL_TOPICS_PATH)
        except NoNodeError:
            return {}
        pending = [(name, zk.get_async(f"{RILL_TOPICS_PATH}/{name}")) for name in children]
        found: dict[str, TopicReplicas] = {}
        for name, result in pending:
            try:
                data, _ = result.get()
            except NoNodeError:
                continue
            if is_replicated_topic_value(data):
                try:
                    found[name] = TopicReplicas.decode(data)
                except ValueError as exc:
                    log.warning("admin.bad_replicated_topic", topic=name, error=str(exc))
        return found

    def _describe_replicated(self, topic: str, replicas: TopicReplicas) -> apb.TopicDescription:
        """Replicas from the assignment, leader/ISR/epoch from each partition's state; a leader that is
        not alive shows as -1. Offsets come from the leaders (-1 when a leader cannot answer)."""
        assert self.zk is not None
        states = read_states(self.zk, topic, range(replicas.partitions))
        alive = self._live_brokers()
        desc = apb.TopicDescription(topic=topic, partition_count=replicas.partitions,
                                    replication_factor=replicas.replication_factor, config=dict(replicas.config))
        for p, assigned in enumerate(replicas.replicas):
            state = states[p][0] if p in states else None
            isr = state.isr if state is not None else ()
            leader = state.leader if state is not None and state.leader in alive else rq.NO_LEADER
            desc.partitions.add(partition=p, leader=leader, broker_partition=p, start_offset=-1, end_offset=-1,
                                replicas=assigned, isr=isr, leader_epoch=state.leader_epoch if state else 0,
                                under_replicated=len(isr) < len(assigned))
        self._fill_offsets(topic, desc, alive)
        return desc

    def _live_brokers(self) -> dict[int, rq.BrokerInfo]:
        """The live brokers by id (this one included)."""
        return {b.broker_id: b for b in self.cluster.brokers()}

    def _fill_offsets(self, topic: str, desc: apb.TopicDescription, alive: Mapping[int, rq.BrokerInfo]) -> None:
        """Start, end and size of each led partition, asked of its leader (this broker too) with OFFSETS over
        one connection per leader: the end is the high watermark, what consumers can read, whoever answers."""
        by_leader: dict[int, list[apb.PartitionDescription]] = {}
        for row in desc.partitions:
            if row.leader != rq.NO_LEADER:
                by_leader.setdefault(row.leader, []).append(row)
        for leader, rows in by_leader.items():
            _ask_offsets(self.cluster.peer_client, alive[leader], topic, rows)

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
        for topic, partition in group_partitions(described, self.catalog.topics()):
            response.partitions.append(self._lag(topic, partition, described.offsets.get((topic, partition), -1),
                                                 owners.get((topic, partition), "")))
        return response

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


def _ask_offsets(peer_client: Callable[[rq.BrokerInfo, float], SimpleConsumer], leader: rq.BrokerInfo, topic: str,
                 rows: list[apb.PartitionDescription]) -> None:
    """Fill ``rows``' offsets from ``leader`` (OFFSETS earliest and latest); a row it cannot answer keeps -1."""
    try:
        with peer_client(leader, REMOTE_TIMEOUT_S) as client:
            for row in rows:
                try:
                    row.start_offset = client.earliest_offset(topic, row.partition)
                    row.end_offset = client.latest_offset(topic, row.partition)
                except BrokerError as exc:  # leadership moved, or the replica is not there yet
                    row.start_offset = row.end_offset = -1
                    log.warning("admin.remote_offsets_failed", topic=topic, partition=row.partition, error=str(exc))
                    continue
                row.size_bytes = row.end_offset - row.start_offset  # offsets are byte positions
    except (ConnectionClosed, OSError, RillError) as exc:
        log.warning("admin.remote_offsets_failed", topic=topic, broker_id=leader.broker_id, error=str(exc))


def _under_replicated(desc: apb.TopicDescription) -> apb.TopicDescription:
    """``desc`` with only its under-replicated partitions (partition_count stays the topic's)."""
    kept = [p for p in desc.partitions if p.under_replicated]
    del desc.partitions[:]
    desc.partitions.extend(kept)
    return desc
