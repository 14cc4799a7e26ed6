"""The broker's own figures, read at each scrape: requests, topics, partitions, connections,
the flusher, quotas, replication and the controller.

Everything is read from live state on the HTTP server's thread: plain counters written by
the event loop (request_metrics), the log manager's copy-on-write maps and the logs'
published offsets, snapshots (``list(...)``) of dictionaries other threads change. No
lock of the request path is taken, and the GIL is handed to the event loop every
:data:`YIELD_EVERY` partitions (as the exposition writer does every 200 lines), so a
scrape slows the loop but never stalls it; a scrape of 10,000 partitions reads each log's
offsets and segment sizes once (docs/benchmarks.md, section 18).

Label values are bounded by what the broker holds: request types, error codes, topics,
partitions, listeners, quota kinds. No connection, client or member is ever a label.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rill.broker.dataplane.connection_quotas import ConnectionQuotas
from rill.broker.dataplane.server import BrokerServer
from rill.broker.log.fsync_stats import FSYNC_SECONDS
from rill.broker.log.log import Log
from rill.broker.log.manager import LogManager
from rill.broker.metrics.exposition import RowFamily
from rill.client.bucket_histogram import histogram_family
from rill.broker.metrics.request_metrics import PHASES, RequestMetrics
from rill.broker.replication.replica import Role
from rill.broker.replication.replica_fetcher import ReplicaFetchers
from rill.broker.replication.replica_manager import ReplicaManager
from rill.coordinator.grpc_call_metrics import GrpcCallMetrics

__all__ = ["BrokerCollector"]

YIELD_EVERY = 100  # partitions read between two GIL hand-overs to the event loop (about 0.5 ms of work)

_PHASE_HELP = {
    "queue": "From the read that completed a request's frame to its handler starting",
    "local": "A request's handler on the event loop",
    "remote": "A request waiting for a long poll, an fsync or the in-sync replicas (requests that waited)",
    "response_send": "From a response being ready to its last byte written",
    "total": "From a request's frame read to its response's last byte written",
}


class BrokerCollector(Collector):
    """Collects one broker's metrics (see the module docstring). ``controller()`` gives the broker's
    controller role or None (a single broker); ``quotas`` may be None."""

    def __init__(self, broker_id: int, requests: RequestMetrics, logs: LogManager, server: BrokerServer,
                 replicas: ReplicaManager, fetchers: ReplicaFetchers, *, quotas: ConnectionQuotas | None = None,
                 max_connections: int = 0, controller: Callable[[], Any] = lambda: None,
                 calls: GrpcCallMetrics | None = None) -> None:
        self.broker_id = broker_id
        self.requests = requests
        self.logs = logs
        self.server = server
        self.replicas = replicas
        self.fetchers = fetchers
        self.quotas = quotas
        self.max_connections = max_connections
        self.controller = controller
        self.calls = calls

    def describe(self) -> list[Metric]:
        return []  # registering must not collect (the broker is not serving yet)

    def collect(self) -> Iterator[Metric]:
        yield from self._requests()
        yield from self._topics()
        yield from self._partitions()
        yield from self._connections()
        yield from self._replication()
        yield from self._grpc()

    # ---------------------------------------------------------------- requests

    def _requests(self) -> Iterator[Metric]:
        total = CounterMetricFamily("rill_requests", "Data-plane requests answered, by type and response error code",
                                    labels=["type", "error"])
        seen = [stats for stats in self.requests.by_type.values() if stats.errors]
        for stats in seen:
            for error, count in stats.error_counts():
                total.add_metric([stats.name, error], count)
        yield total
        for phase in PHASES:
            yield histogram_family(f"rill_request_{phase}_seconds", _PHASE_HELP[phase], ["type"],
                                   (([stats.name], getattr(stats, phase)) for stats in seen))
        throttled = CounterMetricFamily("rill_quota_throttle_seconds",
                                        "Seconds connections were muted for being over a client quota, by quota",
                                        labels=["quota"])
        for quota, seconds in (self.quotas.throttle_seconds.items() if self.quotas is not None else ()):
            throttled.add_metric([quota], seconds)
        yield throttled

    def _topics(self) -> Iterator[Metric]:
        bytes_in = CounterMetricFamily("rill_topic_bytes_in", "Message bytes appended by producers", labels=["topic"])
        messages_in = CounterMetricFamily("rill_topic_messages_in", "Messages appended by producers (a compressed "
                                          "wrapper counts as one)", labels=["topic"])
        bytes_out = CounterMetricFamily("rill_topic_bytes_out", "Message bytes read by consumers' fetches",
                                        labels=["topic"])
        for topic, counters in list(self.requests.topics.items()):
            bytes_in.add_metric([topic], counters.bytes_in)
            messages_in.add_metric([topic], counters.messages_in)
            bytes_out.add_metric([topic], counters.bytes_out)
        yield from (bytes_in, messages_in, bytes_out)

    # ---------------------------------------------------------------- partitions and the flusher

    def _all_logs(self) -> list[Log]:
        return self.logs.logs() + list(self.logs.replicas().values())

    def _partitions(self) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        end = RowFamily("rill_log_end_offset_bytes", "Offset (a byte position) after a partition's last message",
                        labels)
        start = RowFamily("rill_log_start_offset_bytes", "Offset of a partition's first message kept", labels)
        size = RowFamily("rill_log_size_bytes", "Bytes of a partition's segments on disk", labels)
        unflushed = 0
        offline = 0
        for n, log in enumerate(self._all_logs(), 1):
            if n % YIELD_EVERY == 0:
                time.sleep(0)  # the GIL to the event loop now and then (exposition.py)
            key = (log.topic, str(log.partition))
            log_end = log.end_offset
            end.add(key, log_end)
            start.add(key, log.start_offset)
            size.add(key, log.size_bytes)
            unflushed += max(0, log_end - log.flushed_offset)
            offline += log.failed is not None
        yield from (end, start, size)
        yield GaugeMetricFamily("rill_log_unflushed_bytes", "Bytes appended but not yet fsynced, all partitions",
                                value=unflushed)
        yield GaugeMetricFamily("rill_log_flush_backlog_partitions", "Partitions waiting for the flusher",
                                value=self.logs.dirty_count)
        yield GaugeMetricFamily("rill_log_offline_partitions", "Partitions whose log failed (a disk error): "
                                "refused until the broker restarts", value=offline)
        yield from self._disk()
        yield histogram_family("rill_log_flush_seconds", "Duration of a log flush (fsync of its segments, or "
                               "one batched file-system sync), for the whole process", [], [([], FSYNC_SECONDS)])

    def _disk(self) -> Iterator[Metric]:
        """The file system holding log.dir (statvfs; nothing when it cannot be read)."""
        try:
            fs = os.statvfs(self.logs.data_dir)
        except OSError:
            return
        yield GaugeMetricFamily("rill_log_dir_free_bytes", "Bytes available to the broker on log.dir's file system",
                                value=fs.f_bavail * fs.f_frsize)
        yield GaugeMetricFamily("rill_log_dir_total_bytes", "Size of log.dir's file system",
                                value=fs.f_blocks * fs.f_frsize)

    # ---------------------------------------------------------------- connections

    def _connections(self) -> Iterator[Metric]:
        by_listener: dict[str, int] = {bound.endpoint.name: 0 for bound in self.server.listeners}
        for conn in list(self.server.connections.values()):
            by_listener[conn.listener] = by_listener.get(conn.listener, 0) + 1
        active = GaugeMetricFamily("rill_connections", "Open data-plane connections, by listener",
                                   labels=["listener"])
        for name, count in sorted(by_listener.items()):
            active.add_metric([name], count)
        yield active
        yield GaugeMetricFamily("rill_connections_max", "max.connections", value=self.max_connections)
        yield GaugeMetricFamily("rill_open_segment_files", "Segment files held open (log.open.files.max bounds it)",
                                value=len(self.logs.open_files))

    # ---------------------------------------------------------------- gRPC

    def _grpc(self) -> Iterator[Metric]:
        calls, latency = self.calls.snapshot() if self.calls is not None else ({}, {})
        total = CounterMetricFamily("rill_grpc_requests", "gRPC calls (coordinator, admin, replica control) by "
                                    "method and status code", labels=["method", "code"])
        for (method, code), count in sorted(calls.items()):
            total.add_metric([method, code], count)
        yield total
        yield histogram_family("rill_grpc_request_seconds", "Duration of a gRPC call, by method", ["method"],
                               (([method], histogram) for method, histogram in sorted(latency.items())))

    # ---------------------------------------------------------------- replication and the controller

    def _replication(self) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        isr = RowFamily("rill_partition_isr_size", "In-sync replicas of a partition led here", labels)
        assigned = RowFamily("rill_partition_replicas", "Assigned replicas of a partition led here", labels)
        hw = RowFamily("rill_partition_high_watermark_bytes", "End of committed data of a replicated partition "
                       "held here", labels)
        leaders = under = under_min = 0
        for n, replica in enumerate(list(self.replicas.replicas.values()), 1):
            if n % YIELD_EVERY == 0:
                time.sleep(0)
            key = (replica.topic, str(replica.partition))
            hw.add(key, replica.high_watermark)
            state = replica.leader_state
            if replica.role is not Role.LEADER or state is None:
                continue
            leaders += 1
            in_sync = len(state.isr)
            isr.add(key, in_sync)
            assigned.add(key, len(state.replicas))
            under += in_sync < len(state.replicas)
            under_min += in_sync < self.replicas.min_insync_for(replica)
        yield from (isr, assigned, hw)
        yield GaugeMetricFamily("rill_leader_partitions", "Replicated partitions led by this broker", value=leaders)
        yield GaugeMetricFamily("rill_under_replicated_partitions", "Partitions led here with fewer in-sync "
                                "replicas than assigned", value=under)
        yield GaugeMetricFamily("rill_under_min_isr_partitions", "Partitions led here with fewer in-sync replicas "
                                "than min.insync.replicas (acks=all produces are refused)", value=under_min)
        yield CounterMetricFamily("rill_leadership_changes", "Times a replica held here became its partition's "
                                  "leader", value=self.replicas.leaderships_taken)
        lag = RowFamily("rill_replica_lag_bytes", "How far a follower here is behind its leader's high watermark, "
                        "at its last fetch", labels)
        worst = 0
        for status in self.fetchers.describe():
            lag.add((status.topic, str(status.partition)), status.lag_bytes)
            worst = max(worst, status.lag_bytes)
        yield lag
        yield GaugeMetricFamily("rill_replica_max_lag_bytes", "The largest replica_lag_bytes here", value=worst)
        controller = self.controller()
        active = controller is not None and controller.is_active
        yield GaugeMetricFamily("rill_controller_active", "1 on the broker that is the controller, 0 elsewhere",
                                value=1 if active else 0)
        yield GaugeMetricFamily("rill_offline_partitions", "Partitions without a leader (counted by the controller; "
                                "0 on other brokers)", value=controller.offline_partitions() if active else 0)
