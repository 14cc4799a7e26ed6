"""Hosting the group coordinator in the broker: its internal log, replay, and the gRPC server.

The coordinator keeps its records in a log of the broker's own storage, under
``<log.dir>/.coordinator/offsets-0`` (a dot-directory, so it is not a topic). The
log gets its own small segments and no background flushing: the offset store
fsyncs it before every acknowledgement. At start-up every record is replayed
into the coordinator; the store's compaction keeps that replay short.

The services are served by the sync gRPC server (rill.coordinator.grpc_server) or,
with ``grpc.server = "aio"``, by a grpc.aio server on its own event loop
(rill.coordinator.aio_server); both answer through the same coordinator and sink.

With ``zookeeper.connect`` set the broker is one of a cluster: a
:class:`~rill.broker.cluster.group_placement.GroupPlacement` decides which groups it
coordinates, and until :meth:`CoordinatorHost.join_cluster` hands it the ZooKeeper
session it coordinates none (every group RPC answers NOT_COORDINATOR). The
coordinator's instance id (``<log.dir>/.coordinator/instance``, random, created once)
tells its own checkpoints from those of another broker that reused its id.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Sequence
from typing import Any

import grpc

import structlog

from rill.broker.cluster.admin_servicer import AdminServicer
from rill.broker.cluster.elect_leaders import PreferredElector
from rill.broker.cluster.cluster_view import ClusterView
from rill.broker.cluster.group_placement import GroupPlacement
from rill.broker.cluster.log_catalog import LogCatalog
from rill.broker.config import BrokerConfig, ConfigError
from rill.broker.log import checkpoint
from rill.broker.log.log import Log
from rill.broker.log.log_config import LogConfig
from rill.broker.log.manager import LogManager
from rill.client.clock import ThreadTimer
from rill.client.zookeeper.registry import RegistryView
from rill.coordinator import aio_server, grpc_server
from rill.coordinator.group_coordinator import GroupCoordinator
from rill.coordinator.offsets_log import OffsetStore
from rill.coordinator.service import GroupCoordinatorServicer, RecordSink
from rill.v1 import admin_pb2 as apb
from rill.v1 import coordinator_pb2 as pb

log = structlog.get_logger(__name__)

COORDINATOR_DIR = ".coordinator"
INSTANCE_FILE = "instance"
OFFSETS_MAX_RECORD_BYTES = 8 * 1024 * 1024  # a compaction snapshot writes one record per group with all its offsets


def advertised_host(config: BrokerConfig) -> str:
    host = config["advertised.host.name"] or config["host.name"]
    if host in ("", "0.0.0.0", "::"):
        return socket.gethostname()
    return str(host)


def instance_id(directory: str) -> str:
    """The coordinator's instance id, kept in ``directory`` (created on first use)."""
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
    """The Admin service in a cluster: DescribeGroup of a group coordinated elsewhere is NOT_COORDINATOR."""

    def __init__(self, logs: LogManager, coordinator: Any, broker: pb.Broker, placement: GroupPlacement,
                 cluster: ClusterView | None = None, *, default_replication_factor: int = 1) -> None:
        super().__init__(logs, coordinator, broker, cluster, default_replication_factor=default_replication_factor)
        self.placement = placement

    def DescribeCluster(self, request: apb.DescribeClusterRequest,
                        context: grpc.ServicerContext) -> apb.DescribeClusterResponse:
        """The live brokers, and every group (this broker's and the checkpointed ones) with its coordinator."""
        response = super().DescribeCluster(request, context)
        listing, _ = self.coordinator.list_groups(pb.ListGroupsRequest())
        names = {g.group_name for g in listing.groups_info}
        for name in set(self.placement.checkpointed_groups()) - names:
            cp = self.placement.checkpoint(name)
            if cp is not None and not cp.deleted:
                names.add(name)
        del response.coordinators[:]
        for name in sorted(names):
            target = self.placement.coordinator(name)
            response.coordinators.add(consumer_group=name, coordinator_broker_id=target.broker_id if target else -1)
        return response

    def DescribeGroup(self, request: apb.DescribeGroupRequest,
                      context: grpc.ServicerContext) -> apb.DescribeGroupResponse:
        if not self.placement.owns(request.consumer_group):
            return apb.DescribeGroupResponse(consumer_group=request.consumer_group, error_code=pb.NOT_COORDINATOR,
                                             coordinator=self.placement.coordinator(request.consumer_group))
        return super().DescribeGroup(request, context)


class CoordinatorHost:
    """Owns the coordinator's log, store, timer and gRPC server for one broker."""

    def __init__(self, config: BrokerConfig, logs: LogManager, data_port: int,
                 cluster: ClusterView | None = None) -> None:
        self.config = config
        self.log_config = LogConfig(segment_bytes=config["offsets.segment.bytes"],
                                    flush_interval_messages=2**62, flush_interval_ms=2**31 - 1,
                                    retention_ms=-1, retention_bytes=-1,
                                    max_message_bytes=OFFSETS_MAX_RECORD_BYTES)
        self.records_dir = os.path.join(logs.data_dir, COORDINATOR_DIR)
        points = None if logs.clean_start else checkpoint.read_checkpoint(self.records_dir)
        self.records_log = Log.open(self.records_dir, "offsets", 0, self.log_config, clean=logs.clean_start,
                                    truncate_corrupt=config["log.recovery.truncate.corrupt"],
                                    recovery_point=(points or {}).get(("offsets", 0), 0), open_files=logs.open_files)
        self.store = OffsetStore(self.records_log)
        self.timer = ThreadTimer()
        self.broker = pb.Broker(broker_id=config["broker.id"], host=advertised_host(config), port=data_port)
        self.coordinator = GroupCoordinator(
            LogCatalog(logs, cluster), self.timer.clock, self.timer, self.broker,
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            max_group_size=config["group.max.size"])
        replayed = 0
        for record in self.store.replay():
            self.coordinator.replay(record)
            replayed += 1
        log.info("coordinator.loaded", records=replayed, groups=len(self.coordinator.list_groups(
            pb.ListGroupsRequest())[0].groups_info))
        self.sink = RecordSink(self.coordinator, self.store)
        self.coordinator.set_sink(self.sink)
        self.placement: GroupPlacement | None = None
        factor = config["default.replication.factor"]
        self.admin = AdminServicer(logs, self.coordinator, self.broker, cluster, default_replication_factor=factor)
        if config["zookeeper.connect"]:
            if config["offsets.checkpoint.interval.ms"] <= 0:
                raise ConfigError("offsets.checkpoint.interval.ms must be positive")
            self.placement = GroupPlacement(
                self.coordinator, self.sink, self.broker, instance_id(os.path.join(logs.data_dir, COORDINATOR_DIR)),
                interval_ms=config["offsets.checkpoint.interval.ms"],
                handover_timeout_ms=config["zookeeper.session.timeout.ms"])
            self.admin = ClusterAdminServicer(logs, self.coordinator, self.broker, self.placement, cluster,
                                              default_replication_factor=factor)
        self.servicer = GroupCoordinatorServicer(self.coordinator, self.sink,
                                                 commit_timeout_s=config["offsets.commit.timeout.ms"] / 1000,
                                                 router=self.placement)
        self.server: Any = None
        self.health: Any = None
        self.kind = "sync"

    def start(self, extra: Sequence[grpc_server.Registration] = ()) -> int:
        """Start the gRPC server (``grpc.server``: sync or aio); returns its port.

        ``extra`` are more (sync) services for the sync server: the replication plane's
        ReplicaControl. The aio server serves only the coordinator and Admin services.
        """
        address = f"{self.config['host.name']}:{self.config['grpc.port']}"
        self.kind = self.config["grpc.server"]
        if self.kind == "aio":
            if extra:
                log.warning("grpc.aio_without_replica_control", services=[r.service_name for r in extra],
                            detail="grpc.server=aio serves no ReplicaControl: this broker cannot hold replicas")
            self.server, port = aio_server.create_server(address, self.servicer, self.admin,
                                                         max_workers=self.config["grpc.max.workers"])
            self.broker.grpc_port = port
            return port
        self.server, port, self.health = grpc_server.create_server(
            address, [*grpc_server.service_registrations(self.servicer, self.admin), *extra],
            max_workers=self.config["grpc.max.workers"])
        self.broker.grpc_port = port
        return port

    def join_cluster(self, zk: Any, registry: RegistryView, elector: PreferredElector | None = None) -> None:
        """Start coordinating the groups the cluster places here, and serve replicated topics' admin
        (with zookeeper.connect; ``elector``: this broker's controller role, for ElectLeaders)."""
        self.admin.attach_zookeeper(zk, registry, elector)
        if self.placement is not None:
            self.placement.start(zk, registry)
            timeout_s = self.config["zookeeper.connection.timeout.ms"] / 1000
            if not self.placement.wait_serving(timeout_s):
                log.warning("group.placement_not_ready", broker_id=self.broker.broker_id, waited_s=timeout_s)

    def leave_cluster(self) -> None:
        """Stop coordinating; write every group's final state to ZooKeeper (before its session ends). Idempotent."""
        if self.placement is not None:
            self.placement.close()

    def on_topics_changed(self) -> None:
        """A topic was created: rebalance the groups it concerns, on the timer thread (this only posts)."""
        self.timer.schedule(0, self.coordinator.on_topics_changed)

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
        try:
            self.store.close()
        finally:
            try:
                checkpoint.write_checkpoint(self.records_dir, {("offsets", 0): self.records_log.flushed_offset})
            except OSError as exc:
                log.error("coordinator.checkpoint_failed", error=exc.strerror or str(exc), directory=self.records_dir)
