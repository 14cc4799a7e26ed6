"""The broker: wires log storage, the flusher, the request handlers and the server.

This is the one place those parts meet (DESIGN.md). ``Broker(config)`` opens the
logs (running recovery after an unclean shutdown), binds the listener and starts
the flusher; ``serve_forever()`` runs the event loop on the calling thread;
``stop()`` (any thread, or a signal handler) ends it; ``close()`` flushes every
partition and writes the clean-shutdown marker. The broker also hosts the group
coordinator and admin services over gRPC (rill.broker.cluster.coordinator_host) and, with
``zookeeper.connect`` set, registers itself in ZooKeeper (rill.broker.cluster.registration).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

from rill.broker.cluster.cluster_view import ClusterView
from rill.broker.cluster.controlled_shutdown import request_controlled_shutdown
from rill.broker.cluster.controller import Controller
from rill.broker.cluster.isr_exit_client import ZkIsrExit
from rill.broker.cluster.preferred_election import RebalancePolicy
from rill.broker.cluster.replica_control_servicer import ReplicaControlClient, ReplicaControlServicer
from rill.broker.cluster.replica_control_servicer import registration as replica_control_registration
from rill.broker.cluster.coordinator_host import CoordinatorHost, advertised_host, groups_log_config
from rill.broker.cluster.registration import ZkRegistration
from rill.broker.cluster.replicated_topic_creator import ReplicatedTopicCreator
from rill.broker.config import BrokerConfig
from rill.broker.dataplane.handlers import RequestHandlers
from rill.broker.dataplane.server import BrokerServer
from rill.broker.log.manager import LogManager
from rill.broker.log.open_files import OpenFiles
from rill.broker.metrics.broker_collector import BrokerCollector
from rill.broker.metrics.group_collector import GroupCollector
from rill.broker.metrics.metrics_server import MetricsServer
from rill.broker.metrics.request_metrics import RequestMetrics
from rill.broker.replication.isr_writer import IsrWriter
from rill.broker.replication.replica_fetcher import FetcherSettings, ReplicaFetchers
from rill.broker.replication.replica_healer import ReplicaHealer
from rill.broker.replication.replica_manager import ReplicaManager
from rill.broker.replication.replication_throttle import ReplicationThrottle
from rill.broker.security.broker_security import BrokerSecurity
from rill.broker.security.request_acls import DataPlaneAcls
from rill.broker.dataplane.connection_quotas import ConnectionQuotas
from rill.client.errors import StorageError
from rill.coordinator.grpc_call_metrics import GrpcCallMetrics
from rill.client.protocol import requests as rq
from rill.client.topic_names import GROUPS_TOPIC
from rill.client.zookeeper.registry import RegistryView

log = structlog.get_logger(__name__)



class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.security = BrokerSecurity(config)  # (bad TLS files, listeners: refused before anything opens)
        self.logs = LogManager(
            config["log.dir"], config.log_config(), num_partitions=config["num.partitions"],
            truncate_corrupt=config["log.recovery.truncate.corrupt"],
            max_topic_partitions=config["num.partitions.max"], max_partitions=config["max.broker.partitions"],
            open_files=OpenFiles(config["log.open.files.max"], config["log.open.files.idle.ms"]),
            scrub_bytes_per_second=config["log.scrub.bytes.per.second"] if config["log.scrub.enable"] else 0,
            scrub_interval_s=config["log.scrub.interval.hours"] * 3600,
            topic_configs={GROUPS_TOPIC: groups_log_config(config)})
        try:
            self.server = BrokerServer(
                config["host.name"], config["port"],
                listeners=self.security.listener_specs(),
                authentication_timeout_ms=config["authentication.timeout.ms"],
                max_request_size=config["socket.request.max.bytes"],
                max_connections=config["max.connections"],
                max_connections_per_ip=config["max.connections.per.ip"],
                queued_max_request_bytes=config["queued.max.request.bytes"],
                request_read_timeout_ms=config["request.read.timeout.ms"],
                idle_timeout_ms=config["connections.max.idle.ms"])
        except OSError:
            self.logs.close()
            raise
        self.cluster = ClusterView(self.logs, self.identity)  # the registry joins it once ZooKeeper is up
        if not config["zookeeper.connect"]:
            self.security.use_data_dir(config["log.dir"])  # (a cluster's are in ZooKeeper)
        self.throttle = ReplicationThrottle()  # set by the controller (reassignment --throttle)
        self.fetchers = ReplicaFetchers(FetcherSettings(
            broker_id=config["broker.id"], max_wait_ms=config["replica.fetch.wait.max.ms"],
            min_bytes=config["replica.fetch.min.bytes"], max_bytes=config["replica.fetch.max.bytes"],
            backoff_ms=config["replica.fetch.backoff.ms"], socket_timeout_ms=config["replica.socket.timeout.ms"]),
            self.throttle, self.security.inter_broker_client())
        self.replicas = ReplicaManager(config["broker.id"], self.logs, self.server, self.fetchers, None,
                                       lag_max_ms=config["replica.lag.time.max.ms"],
                                       min_insync=config["min.insync.replicas"])
        self.replicas.inter_broker_listener = self.security.inter_broker
        self.cluster.peer_listener = self.security.inter_broker
        self.cluster.peer_security = self.fetchers.security
        self.cluster.replicated = self.replicas
        self.healer = ReplicaHealer(lambda key: self.replicas.replicas.get(key))  # corrupt replica data, from the ISR
        self.logs.on_corruption.append(self.healer.corruption_found)
        self.replica_control = ReplicaControlServicer(self.replicas, throttle=self.throttle)
        self.controller: Controller | None = None
        self.request_metrics = RequestMetrics() if config["metrics.port"] != 0 else None
        try:
            self.coordination = CoordinatorHost(config, self.logs, self.port, self.cluster,
                                                replicas=self.replicas, loop=self.server,
                                                broker_token=self.broker_token,
                                                inter_broker=self.security.inter_broker_grpc)
            if self.request_metrics is not None:
                self.coordination.call_metrics = GrpcCallMetrics()
            grpc_security = self.security.grpc_security(config["host.name"])
            self.grpc_port = self.coordination.start(extra=[replica_control_registration(self.replica_control)],
                                                     security=grpc_security)
            self.grpc_tls_port = grpc_security.tls_port
            self.cluster.endpoints = self.security.advertised(self.server.listeners, advertised_host(config),
                                                              self.grpc_port, self.grpc_tls_port)
        except BaseException:
            self.server.close()
            self.logs.close()
            raise
        self.handlers = RequestHandlers(
            self.server, self.logs, self.logs.flusher, self.cluster,
            auto_create=config["auto.create.topics.enable"], max_wait_ms=config["fetch.max.wait.ms"],
            replicas=self.replicas,
            acls=DataPlaneAcls(self.security.authorize) if config["authorizer.enable"] else None)
        self.server.handle = self.handlers
        self.handlers.metrics = self.request_metrics
        self.handlers.topics.reserve_partitions = self.security.partition_cap.reserve
        self.coordination.admin.reserve_partitions = self.security.partition_cap.reserve
        self.handlers.topics.auto_partitions = config["num.partitions"]
        quotas = ConnectionQuotas(self.security.quotas, self.server)
        self.handlers.quotas = quotas
        self.server.on_fetched = quotas.fetched
        if self.coordination.placement is not None:
            self.coordination.placement.appended = self.handlers.replica_appended
        self.metrics_server: MetricsServer | None = None
        if self.request_metrics is not None:
            try:
                self.metrics_server = self._serve_metrics(config, self.request_metrics, quotas)
            except BaseException:
                self.coordination.close()
                self.server.close()
                self.logs.close()
                raise
        self.zookeeper: ZkRegistration | None = None
        self.registry: RegistryView | None = None  # the cluster as ZooKeeper lists it (with zookeeper.connect)
        self.replicated_creator: ReplicatedTopicCreator | None = None  # default.replication.factor != 1 in a cluster
        if config["zookeeper.connect"]:
            try:
                self._start_zookeeper(config)
            except BaseException:
                if self.metrics_server is not None:
                    self.metrics_server.close()
                self.coordination.close()
                self.server.close()
                self.logs.close()
                raise
        self.logs.on_topic_created.append(self._on_topic_created)
        self.logs.on_topic_deleted.append(self._on_topic_deleted)
        self.replicas.on_partitions_added.append(self.coordination.on_topics_changed)
        self.replicas.on_topics_deleted.append(self.coordination.on_topics_deleted)
        self.coordination.admin.delete_topic_enable = config["delete.topic.enable"]
        self._closed = False
        self._stopping = False
        self.ready = threading.Event()
        """Set once serving, with the groups led here loaded (see :meth:`serve_forever`)."""

    def _start_zookeeper(self, config: BrokerConfig) -> None:
        """Register in ZooKeeper and start watching the registry; leaves nothing running on failure."""
        registration = ZkRegistration(
            config["zookeeper.connect"], config["broker.id"], advertised_host(config), self.port,
            self.logs.topics, grpc_port=self.registered_grpc_port, grpc_tls_port=self.grpc_tls_port,
            session_timeout_ms=config["zookeeper.session.timeout.ms"],
            connection_timeout_ms=config["zookeeper.connection.timeout.ms"], endpoints=self.cluster.endpoints)
        registration.start()
        self.security.use_zookeeper(registration.zk)
        registry = RegistryView(registration.zk)
        try:
            registry.start(timeout=config["zookeeper.connection.timeout.ms"] / 1000)
        except BaseException:
            registry.close()
            registration.close()
            raise
        self.zookeeper, self.registry = registration, registry
        self.replicas.isr_writer = IsrWriter(registration.zk)
        self.healer.isr_exit = ZkIsrExit(registration.zk, registry, config["broker.id"],
                                         timeout_s=3 * config["controller.socket.timeout.ms"] / 1000,
                                         token=self.broker_token, via=self.security.inter_broker_grpc)
        self.replicas.registry = registry
        rebalance = RebalancePolicy(config["auto.leader.rebalance.enable"],
                                    config["leader.imbalance.check.interval.seconds"],
                                    config["leader.imbalance.per.broker.percentage"])
        self.controller = Controller(registration.zk, config["broker.id"], registry,
                                     ReplicaControlClient(self.broker_token, self.security.inter_broker_grpc),
                                     unclean_default=config["unclean.leader.election.enable"],
                                     request_timeout_s=config["controller.socket.timeout.ms"] / 1000,
                                     rebalance=rebalance)
        self.replica_control.controller = self.controller
        self.controller.start()
        self.coordination.join_cluster(registration.zk, registry, self.controller)
        self.coordination.admin.attach_reassigner(self.controller, self.controller)
        self.cluster.registry = registry
        if config["default.replication.factor"] != 1:  # the data plane creates replicated topics (Kafka's way)
            self.replicated_creator = ReplicatedTopicCreator(registration.zk, registry,
                                                             config["default.replication.factor"],
                                                             config["num.partitions"])
            self.handlers.topics.replicated_creation = self.replicated_creator

    def _serve_metrics(self, config: BrokerConfig, requests: RequestMetrics,
                       quotas: ConnectionQuotas) -> MetricsServer:
        """Start the /metrics endpoint (metrics.port); a port that cannot be bound stops the start."""
        collectors = [
            BrokerCollector(config["broker.id"], requests, self.logs, self.server, self.replicas, self.fetchers,
                            quotas=quotas, max_connections=config["max.connections"],
                            controller=lambda: self.controller, calls=self.coordination.call_metrics),
            GroupCollector(self.coordination.coordinator, self.coordination.catalog),
        ]
        host, port = config["metrics.host"] or config["host.name"], config["metrics.port"]
        try:
            return MetricsServer(host, max(port, 0), collectors)
        except OSError as exc:
            raise RuntimeError(f"cannot serve metrics on {host}:{port} (metrics.port): {exc.strerror or exc}; "
                               "set metrics.port to a free port, -1 for any, or 0 for none") from exc

    def _on_topic_created(self, topic: str, partitions: int) -> None:
        """A new topic (any creator, any thread): only posts work to the coordinator and ZooKeeper threads."""
        self.coordination.on_topics_changed()
        if self.zookeeper is not None:
            self.zookeeper.topics_changed()

    def _on_topic_deleted(self, topic: str) -> None:
        """A 0.7-style topic deleted here (Admin DeleteTopic's thread): its registration goes (posts only);
        a single broker's groups forget its offsets (in a cluster other brokers may still hold partitions)."""
        if self.zookeeper is not None:
            self.zookeeper.topics_changed()
        else:
            self.coordination.on_topics_deleted([topic])

    def identity(self) -> rq.BrokerInfo:
        """This broker as METADATA describes it (advertised host, data-plane and gRPC ports)."""
        b = self.coordination.broker
        return rq.BrokerInfo(b.broker_id, b.host, b.port, b.grpc_port)

    @property
    def broker_token(self) -> Callable[[], str]:
        """What this broker's gRPC calls to the others show (principal.BROKER): the cluster's token, read at
        each call (every broker of a cluster takes it from ZooKeeper once joined, security or not)."""
        security = self.security
        return lambda: security.broker_token

    @property
    def registered_grpc_port(self) -> int:
        """The gRPC port of this broker's registration (``/rill/brokers/[id]``): the plaintext one, or the
        TLS one without it (``grpc.port = -1``, allowed in a cluster whose brokers call each other over TLS).
        Brokers count a registration without a gRPC port as not a rill broker (no replicas, no groups)."""
        return self.grpc_port if self.grpc_port >= 0 else self.grpc_tls_port

    @property
    def port(self) -> int:
        """The data port published as this broker's address (its PLAINTEXT listener's, if it has one)."""
        return int(BrokerSecurity.registered(self.server.listeners).port)

    def serve_forever(self) -> None:
        """Serve until :meth:`stop`. ``broker.ready`` is logged (and :attr:`ready` set) once the loop runs
        and, in a cluster, the groups of the groups topic partitions led here are loaded (bounded by
        ``zookeeper.connection.timeout.ms``), so a client that waits for it finds its groups served."""
        self.logs.start()
        threading.Thread(target=self._announce_ready, name="rill-ready", daemon=True).start()
        self.server.serve_forever()

    def _announce_ready(self) -> None:
        self.coordination.wait_serving()
        secured = {"listeners": [str(b.endpoint) for b in self.server.listeners],
                   "grpc_tls_port": self.grpc_tls_port} if self.security.enabled else {}
        metrics = {"metrics_port": self.metrics_server.port} if self.metrics_server is not None else {}
        via = self.security.inter_broker_grpc
        peers = {"peer_grpc": via.describe()} if self.zookeeper is not None and via.tls else {}
        log.info("broker.ready", broker_id=self.config["broker.id"], host=self.server.host, port=self.port,
                 grpc_port=self.grpc_port, log_dir=str(self.config["log.dir"]), topics=len(self.logs.topics()),
                 **metrics, **secured, **peers)
        self.ready.set()

    def stop(self) -> None:
        """Stop serving (any thread, or a signal handler). A broker holding replicas in a cluster first
        moves its leaderships away (controlled shutdown), on a thread of its own, while it still serves
        (the controller's LeaderAndIsr making it a follower is applied). Once the event loop has stopped,
        a LeaderAndIsr is answered UNAVAILABLE at once (event_loop.LoopStopped), so no gRPC handler
        holds the stop: :meth:`close`'s gRPC grace ends as soon as the calls under way have answered."""
        if self._stopping:
            return
        self._stopping = True
        if self.config["controlled.shutdown.enable"] and self.zookeeper is not None and self.replicas.replicas:
            threading.Thread(target=self._controlled_stop, name="rill-controlled-shutdown", daemon=True).start()
            return
        self.server.stop()

    def _controlled_stop(self) -> None:
        assert self.zookeeper is not None and self.registry is not None
        client = ReplicaControlClient(self.broker_token, self.security.inter_broker_grpc)
        self.replicas.stop_following()
        try:
            request_controlled_shutdown(
                self.zookeeper.zk, self.registry, client, self.config["broker.id"],
                retries=self.config["controlled.shutdown.max.retries"],
                backoff_s=self.config["controlled.shutdown.retry.backoff.ms"] / 1000,
                timeout_s=self.config["controller.socket.timeout.ms"] / 1000)
        finally:
            client.close()
            self.server.stop()

    def close(self) -> list[str]:
        """Stop the flusher, flush everything and mark the shutdown clean. Idempotent.

        A partition that failed (a full disk, say) does not make the stop fail: it is
        logged and named in the clean-shutdown marker, so the next start recovers it.
        The gRPC server answers until the end (its grace lets calls under way finish);
        none waits on a stopped part: LeaderAndIsr is refused UNAVAILABLE and, once the
        controller here has closed, ControlledShutdown and LeaveIsr NOT_CONTROLLER.

        Returns:
            The partitions that had failed, as ``<topic>-<partition>``.
        """
        if self._closed:
            return []
        self._closed = True
        if self.metrics_server is not None:
            self.metrics_server.close()
        self.healer.close()
        self.security.close()
        if self.controller is not None:
            # from now on ControlledShutdown and LeaveIsr answer NOT_CONTROLLER at once (the asking broker reads
            # the new controller and asks again), not after 30 s waiting for a worker that has stopped
            self.replica_control.controller = None
            self.controller.close()  # another broker takes over at once
        self.coordination.leave_cluster()  # groups' final state to ZooKeeper while the session is up
        if self.replicated_creator is not None:
            self.replicated_creator.close()  # the creation under way ends while the session is up
        if self.registry is not None:
            self.registry.close()
        if self.zookeeper is not None:
            self.zookeeper.close()
        try:
            self.coordination.close()
        except StorageError as exc:  # its log failed: its next start recovers it (no clean marker for it)
            log.error("coordinator.close_failed", error=str(exc))
        self.fetchers.close()
        self.replicas.close()
        if self.replicas.isr_writer is not None:
            self.replicas.isr_writer.close()
        failed = self.logs.close()
        log.info("broker.stopped", broker_id=self.config["broker.id"], failed_partitions=failed)
        return failed
