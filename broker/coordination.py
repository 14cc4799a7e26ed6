"""Hosting the group coordinator in the broker: its internal log, replay, and the gRPC server.

The coordinator keeps its records in a log of the broker's own storage, under
``<log.dir>/.coordinator/offsets-0`` (a dot-directory, so it is not a topic). The
log gets its own small segments and no background flushing: the offset store
fsyncs it before every acknowledgement. At start-up every record is replayed
into the coordinator; the store's compaction keeps that replay short.

The services are served by the sync gRPC server (rill.coordinator.grpc_server) or,
with ``grpc.server = "aio"``, by a grpc.aio server on its own event loop
(rill.coordinator.aio_server); both answer through the same coordinator and sink.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import structlog

from rill.broker.admin import AdminServicer
from rill.broker.catalog import LogCatalog
from rill.broker.config import BrokerConfig
from rill.broker.log.config import LogConfig
from rill.broker.log.log import Log
from rill.broker.log.manager import LogManager
from rill.coordinator import aio_server, grpc_server
from rill.coordinator.clock import ThreadTimer
from rill.coordinator.coordinator import GroupCoordinator
from rill.coordinator.offsets_log import OffsetStore
from rill.coordinator.service import GroupCoordinatorServicer, RecordSink
from rill.v1 import coordinator_pb2 as pb

log = structlog.get_logger(__name__)

COORDINATOR_DIR = ".coordinator"
OFFSETS_MAX_RECORD_BYTES = 8 * 1024 * 1024  # a compaction snapshot writes one record per group with all its offsets


def advertised_host(config: BrokerConfig) -> str:
    host = config["advertised.host.name"] or config["host.name"]
    if host in ("", "0.0.0.0", "::"):
        return socket.gethostname()
    return str(host)


class CoordinatorHost:
    """Owns the coordinator's log, store, timer and gRPC server for one broker."""

    def __init__(self, config: BrokerConfig, logs: LogManager, data_port: int) -> None:
        self.config = config
        self.log_config = LogConfig(segment_bytes=config["offsets.segment.bytes"],
                                    flush_interval_messages=2**62, flush_interval_ms=2**31 - 1,
                                    retention_ms=-1, retention_bytes=-1,
                                    max_message_bytes=OFFSETS_MAX_RECORD_BYTES)
        self.records_log = Log.open(os.path.join(logs.data_dir, COORDINATOR_DIR), "offsets", 0, self.log_config,
                                    clean=logs.clean_start, truncate_corrupt=config["log.recovery.truncate.corrupt"])
        self.store = OffsetStore(self.records_log)
        self.timer = ThreadTimer()
        self.broker = pb.Broker(broker_id=config["broker.id"], host=advertised_host(config), port=data_port)
        self.coordinator = GroupCoordinator(
            LogCatalog(logs), self.timer.clock, self.timer, self.broker,
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
        self.servicer = GroupCoordinatorServicer(self.coordinator, self.sink,
                                                 commit_timeout_s=config["offsets.commit.timeout.ms"] / 1000)
        self.admin = AdminServicer(logs, self.coordinator, self.broker)
        self.server: Any = None
        self.health: Any = None
        self.kind = "sync"

    def start(self) -> int:
        """Start the gRPC server (``grpc.server``: sync or aio); returns its port."""
        address = f"{self.config['host.name']}:{self.config['grpc.port']}"
        self.kind = self.config["grpc.server"]
        if self.kind == "aio":
            self.server, port = aio_server.create_server(address, self.servicer, self.admin,
                                                         max_workers=self.config["grpc.max.workers"])
            self.broker.grpc_port = port
            return port
        self.server, port, self.health = grpc_server.create_server(
            address, grpc_server.service_registrations(self.servicer, self.admin),
            max_workers=self.config["grpc.max.workers"])
        self.broker.grpc_port = port
        return port

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
        self.stop()
        self.store.close()
