"""The broker's ``/metrics`` endpoint: one Prometheus registry per broker, served over HTTP.

rill.broker.metrics.exposition serves it (its own text writer: prometheus-client's formats
too slowly for tens of thousands of series; gzip when the scraper asks). The registry holds the broker's collectors
(broker_collector, group_collector) and prometheus-client's process collector
(``process_open_fds``, ``process_resident_memory_bytes``, CPU seconds ...), so each broker
in one test process has metrics of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.registry import Collector

from rill.broker.metrics.exposition import MetricsHttpServer

__all__ = ["MetricsServer"]


class MetricsServer:
    """Serves ``collectors`` on ``host``:``port`` (0: a free port). Raises OSError if it cannot bind."""

    def __init__(self, host: str, port: int, collectors: Sequence[Collector]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        for collector in collectors:
            self.registry.register(collector)
        ProcessCollector(registry=self.registry)
        self._server: MetricsHttpServer | None = MetricsHttpServer(host or "0.0.0.0", port, self.registry)
        self.host = host
        self.port = self._server.port

    def close(self) -> None:
        """Stop serving (idempotent)."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
