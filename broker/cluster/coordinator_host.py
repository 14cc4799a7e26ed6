"""Hosting the group coordinator in the broker: where its records go, and the gRPC server.

A single broker keeps the coordinator's records in a log of its own storage, under
``<log.dir>/.coordinator/offsets-0`` (a dot-directory, so it is not a topic). The log
gets its own small segments and no background flushing: the offset store fsyncs it
before every acknowledgement. At start-up every record is replayed into the
coordinator; the store's compaction keeps that replay short.

With ``zookeeper.connect`` set the broker is one of a cluster, and the same records
go instead to the internal replicated topic ``__rill_groups``: a
:class:`~rill.broker.cluster.group_log_placement.GroupLogPlacement` serves the groups
of the partitions this broker leads (it loads each when leadership arrives), and every
other group RPC answers NOT_COORDINATOR. The local log is then only read, once, to
seed empty partitions when a cluster is upgraded (rill.broker.cluster.group_import).
The coordinator's instance id (``<log.dir>/.coordinator/instance``, random, created
once) tells the checkpoints this broker wrote before the upgrade from others'.

The services are served by the sync gRPC server (rill.coordinator.grpc_server) or,
with ``grpc.server = "aio"``, by a grpc.aio server on its own event loop
(rill.coordinator.aio_server); both answer through the same coordinator and sink.
The calls this broker makes to the others' coordinators (a forwarded CreateGroup or
ListGroups, DescribeCluster's listing) carry the cluster's broker token when given one,
over TLS when brokers call each other so (rill.broker.security.inter_broker_grpc).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import grpc

import structlog

from rill.broker.cluster.admin_servicer import AdminServicer
from rill.broker.cluster.elect_leaders import PreferredElector
from rill.broker.cluster.cluster_view import ClusterView
from rill.broker.cluster.group_import import fold_legacy
from rill.broker.cluster.group_log_placement import GroupLogPlacement, GroupsTopicSettings
from rill.broker.cluster.log_catalog import LogCatalog
from rill.broker.config import BrokerConfig, ConfigError
from rill.broker.log import checkpoint
from rill.broker.log.log import Log
from rill.broker.log.log_config import LogConfig
from rill.broker.log.manager import LogManager
from rill.client.clock import ThreadTimer
from rill.client.zookeeper.registry import RegistryView
from rill.coordinator import aio_server, grpc_server
from rill.coordinator.grpc_auth import ServerSecurity
from rill.coordinator.grpc_call_metrics import GrpcCallMetrics
from rill.broker.dataplane.storage import Loop
from rill.broker.replication.replica_manager import ReplicaManager
from rill.broker.security.inter_broker_grpc import PLAINTEXT_GRPC, InterBrokerGrpc
from rill.coordinator.group_checkpoint import GroupSnapshot, Writer
from rill.coordinator.deleted_topics import forget_deleted_topics
from rill.coordinator.group_coordinator import GroupCoordinator
from rill.coordinator.group_shards import SingleShard
from rill.coordinator.offsets_log import OffsetStore
from rill.coordinator.routing import Peers, list_groups
from rill.coordinator.service import GroupCoordinatorServicer, RecordSink
from rill.v1 import admin_pb2 as apb
from rill.v1 import coordinator_pb2 as pb

log = structlog.get_logger(__name__)

COORDINATOR_DIR = ".coordinator"
INSTANCE_FILE = "instance"
OFFSETS_MAX_RECORD_BYTES = 8 * 1024 * 1024  # a compaction snapshot writes one record per group with all its offsets


def groups_log_config(config: BrokerConfig) -> LogConfig:
    """The logs of the groups topic's replicas: kept whole (compaction by snapshots, never retention),
    in segments of ``offsets.segment.bytes``, with room for a snapshot record of a large group."""
    return dataclasses.replace(config.log_config(), retention_ms=-1, retention_bytes=-1,
                               segment_bytes=config["offsets.segment.bytes"],
                               max_message_bytes=OFFSETS_MAX_RECORD_BYTES)


def advertised_host(config: BrokerConfig) -> str:
    host = config["advertised.host.name"] or config["host.name"]
    if host in ("", "0.0.0.0", "::"):
        return socket.gethostname()
    return str(host)


def instance_id(directory: str, *, create: bool = False) -> str:
    """The coordinator's instance id, kept in ``directory`` (created on first use)."""
    if create:
        os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, INSTANCE_FILE)
    try:
        with open(path) as f:
            found = f.read().strip()
        if found:
            return found
    except FileNotFoundError:
        pass
    value = uuid.uuid4().hex
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(value + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return value


class ClusterAdminServicer(AdminServicer):
    """The Admin service in a cluster: groups are where their groups topic partition is led."""

    def __init__(self, logs: LogManager, coordinator: Any, broker: pb.Broker, placement: GroupLogPlacement,
                 cluster: ClusterView | None = None, *, default_replication_factor: int = 1,
                 peers: Peers | None = None) -> None:
        super().__init__(logs, coordinator, broker, cluster, default_replication_factor=default_replication_factor)
        self.placement = placement
        self.peers = peers if peers is not None else Peers()

    def DescribeCluster(self, request: apb.DescribeClusterRequest,
                        context: grpc.ServicerContext) -> apb.DescribeClusterResponse:
        """The live brokers, and every group of every live broker with its coordinator."""
        response = super().DescribeCluster(request, context)
        listing = list_groups(self.placement, self.peers, lambda req: self.coordinator.list_groups(req)[0],
                              pb.ListGroupsRequest(), False, context.time_remaining())
        del response.coordinators[:]
        for info in listing.groups_info:
            target = self.placement.coordinator(info.group_name)
            response.coordinators.add(consumer_group=info.group_name,
                                      coordinator_broker_id=target.broker_id if target else -1)
        return response

    def DescribeGroup(self, request: apb.DescribeGroupRequest,
                      context: grpc.ServicerContext) -> apb.DescribeGroupResponse:
        if not self.placement.owns(request.consumer_group):
            return apb.DescribeGroupResponse(consumer_group=request.consumer_group, error_code=pb.NOT_COORDINATOR,
                                             coordinator=self.placement.coordinator(request.consumer_group))
        return super().DescribeGroup(request, context)


class CoordinatorHost:
    """Owns the coordinator's log, store, timer and gRPC server for one broker.

    ``broker_token()`` is the cluster's broker token, sent with the calls to other brokers
    (None: the calls are anonymous, which only a broker without authorizer.enable accepts);
    ``inter_broker`` says where and how they are called (over TLS, on the TLS gRPC port of
    each peer's registration once the cluster is joined).
    """

    def __init__(self, config: BrokerConfig, logs: LogManager, data_port: int,
                 cluster: ClusterView | None = None, *, replicas: ReplicaManager | None = None,
                 loop: Loop | None = None, broker_token: Callable[[], str] | None = None,
                 inter_broker: InterBrokerGrpc = PLAINTEXT_GRPC) -> None:
        self.config = config
        self.inter_broker = inter_broker
        self._registry: RegistryView | None = None  # set by join_cluster: where peers' addresses are read
        self.log_config = LogConfig(segment_bytes=config["offsets.segment.bytes"],
                                    flush_interval_messages=2**62, flush_interval_ms=2**31 - 1,
                                    retention_ms=-1, retention_bytes=-1,
                                    max_message_bytes=OFFSETS_MAX_RECORD_BYTES)
        self.records_dir = os.path.join(logs.data_dir, COORDINATOR_DIR)
        self.timer = ThreadTimer()
        self.broker = pb.Broker(broker_id=config["broker.id"], host=advertised_host(config), port=data_port)
        self.catalog = LogCatalog(logs, cluster)
        self.coordinator = GroupCoordinator(
            self.catalog, self.timer.clock, self.timer, self.broker,
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            max_group_size=config["group.max.size"])
        self.placement: GroupLogPlacement | None = None
        self.records_log: Log | None = None
        self.store: OffsetStore | None = None
        factor = config["default.replication.factor"]
        if config["zookeeper.connect"]:
            if replicas is None or loop is None:
                raise ConfigError("a broker in a cluster hosts its coordinator on its replicas")
            self.placement = GroupLogPlacement(
                self.coordinator, replicas, loop, self.broker,
                Writer(self.broker.broker_id, instance_id(self.records_dir, create=True)),
                GroupsTopicSettings(config["offsets.topic.num.partitions"], config["offsets.topic.replication.factor"]),
                legacy=self._read_legacy(logs))
            self.sink = RecordSink(self.coordinator, self.placement)
            self.admin: AdminServicer = ClusterAdminServicer(logs, self.coordinator, self.broker, self.placement,
                                                             cluster, default_replication_factor=factor,
                                                             peers=self._peers(broker_token))
        else:
            self.records_log = self._open_local_log(logs)
            self.store = OffsetStore(self.records_log)
            replayed = 0
            for record in self.store.replay():
                self.coordinator.replay(record, loading=True)
                replayed += 1
            log.info("coordinator.loaded", records=replayed, groups=len(self.coordinator.group_names()))
            self.sink = RecordSink(self.coordinator, SingleShard(self.store))
            self.admin = AdminServicer(logs, self.coordinator, self.broker, cluster, default_replication_factor=factor)
        self.coordinator.set_sink(self.sink)
        self.servicer = GroupCoordinatorServicer(self.coordinator, self.sink,
                                                 commit_timeout_s=config["offsets.commit.timeout.ms"] / 1000,
                                                 router=self.placement)
        self.servicer.peers = self._peers(broker_token)  # its forwarded calls show the broker token
        self.server: Any = None
        self.health: Any = None
        self.kind = "sync"
        self.call_metrics: GrpcCallMetrics | None = None  # set before start() to count gRPC calls (metrics.port)

    def _peers(self, broker_token: Callable[[], str] | None) -> Peers:
        """Stubs of the other brokers' coordinators: over TLS, each peer is called on its inter-broker
        listener's gRPC port as its registration lists it (the ``pb.Broker`` a call names carries the
        port clients use); plaintext, on the ``host:grpc_port`` the ``pb.Broker`` names, as before."""
        if not self.inter_broker.tls:
            return Peers(broker_token)
        return Peers(broker_token, self.inter_broker.credentials, self._peer_address)

    def _peer_address(self, broker: pb.Broker) -> str | None:
        registry = self._registry
        found = registry.snapshot.brokers.get(broker.broker_id) if registry is not None else None
        return None if found is None else self.inter_broker.address(found)

    def _open_local_log(self, logs: LogManager) -> Log:
        points = None if logs.clean_start else checkpoint.read_checkpoint(self.records_dir)
        return Log.open(self.records_dir, "offsets", 0, self.log_config, clean=logs.clean_start,
                        truncate_corrupt=self.config["log.recovery.truncate.corrupt"],
                        recovery_point=(points or {}).get(("offsets", 0), 0), open_files=logs.open_files)

    def _read_legacy(self, logs: LogManager) -> dict[str, GroupSnapshot]:
        """The groups of the local log of before the groups topic, if there is one (read once, kept)."""
        if not os.path.isdir(os.path.join(self.records_dir, "offsets-0")):
            return {}
        legacy_log = self._open_local_log(logs)
        store = OffsetStore(legacy_log)
        try:
            groups = fold_legacy(store.replay())
        finally:
            store.close()
        if groups:
            log.info("coordinator.legacy_groups", groups=len(groups), directory=self.records_dir,
                     detail="imported into __rill_groups partitions that start empty; the local log is kept")
        return groups

    def start(self, extra: Sequence[grpc_server.Registration] = (), security: ServerSecurity | None = None) -> int:
        """Start the gRPC server (``grpc.server``: sync or aio); returns its port.

        ``extra`` are more (sync) services for the sync server: the replication plane's
        ReplicaControl. The aio server serves only the coordinator and Admin services.
        """
        port_setting = self.config["grpc.port"]
        address = None if port_setting < 0 else f"{self.config['host.name']}:{port_setting}"
        self.kind = self.config["grpc.server"]
        if self.kind == "aio":
            if extra:
                log.warning("grpc.aio_without_replica_control", services=[r.service_name for r in extra],
                            detail="grpc.server=aio serves no ReplicaControl: this broker cannot hold replicas")
            self.server, port = aio_server.create_server(address, self.servicer, self.admin,
                                                         max_workers=self.config["grpc.max.workers"], security=security,
                                                         metrics=self.call_metrics)
            self.broker.grpc_port = port
            return port
        self.server, port, self.health = grpc_server.create_server(
            address, [*grpc_server.service_registrations(self.servicer, self.admin), *extra],
            max_workers=self.config["grpc.max.workers"], security=security, metrics=self.call_metrics)
        self.broker.grpc_port = port
        return port

    def join_cluster(self, zk: Any, registry: RegistryView, elector: PreferredElector | None = None) -> None:
        """Start coordinating the groups of the groups topic partitions led here, and serve replicated
        topics' admin (with zookeeper.connect; ``elector``: this broker's controller role, for ElectLeaders)."""
        self._registry = registry
        self.admin.attach_zookeeper(zk, registry, elector)
        if self.placement is not None:
            self.placement.start(zk, registry)

    def wait_serving(self) -> None:
        """In a cluster, wait (while the event loop runs) until the groups led here are loaded; bounded
        by ``zookeeper.connection.timeout.ms``, logged when it runs out."""
        if self.placement is None:
            return
        timeout_s = self.config["zookeeper.connection.timeout.ms"] / 1000
        if not self.placement.wait_serving(timeout_s):
            log.warning("group.placement_not_ready", broker_id=self.broker.broker_id, waited_s=timeout_s,
                        detail="groups of __rill_groups partitions led here answer NOT_COORDINATOR until loaded")

    def leave_cluster(self) -> None:
        """Stop coordinating (the groups' state is in the groups topic already). Idempotent."""
        if self.placement is not None:
            self.placement.close()

    def on_topics_changed(self) -> None:
        """A topic was created: rebalance the groups it concerns, on the timer thread (this only posts)."""
        self.timer.schedule(0, self.coordinator.on_topics_changed)

    def on_topics_deleted(self, topics: Sequence[str]) -> None:
        """Topics were deleted: their committed offsets go from the groups served here (posts only)."""
        owns = self.placement.owns if self.placement is not None else (lambda _name: True)
        self.timer.schedule(0, lambda: forget_deleted_topics(self.coordinator, self.sink, owns, topics))

    def stop(self, grace: float = 5.0) -> None:
        if self.server is not None:
            if self.kind == "aio":
                self.server.stop(grace)
            else:
                grpc_server.stop(self.server, self.health, grace)
            self.server = None
        self.timer.stop()

    def close(self) -> None:
        self.leave_cluster()
        self.stop()
        self.servicer.peers.close()
        if isinstance(self.admin, ClusterAdminServicer):
            self.admin.peers.close()
        if self.store is None or self.records_log is None:
            return
        try:
            self.store.close()
        finally:
            try:
                checkpoint.write_checkpoint(self.records_dir, {("offsets", 0): self.records_log.flushed_offset})
            except OSError as exc:
                log.error("coordinator.checkpoint_failed", error=exc.strerror or str(exc), directory=self.records_dir)
