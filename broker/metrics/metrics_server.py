"""The broker's ``/metrics`` endpoint: one Prometheus registry per broker, served over HTTP.

``prometheus_client.start_http_server`` runs a threading HTTP server on a daemon thread
(gzip when the scraper asks for it). The registry holds the broker's collectors
(broker_collector, group_collector) and prometheus-client's process collector
(``process_open_fds``, ``process_resident_memory_bytes``, CPU seconds ...), so each broker
in one test process has metrics of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.registry import Collector

__all__ = ["MetricsServer"]


class MetricsServer:
    """Serves ``collectors`` on ``host``:``port`` (0: a free port). Raises OSError if it cannot bind."""

    def __init__(self, host: str, port: int, collectors: Sequence[Collector]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        for collector in collectors:
            self.registry.register(collector)
        ProcessCollector(registry=self.registry)
        self._server: Any
        self._server, self._thread = start_http_server(port, addr=host or "0.0.0.0", registry=self.registry)
        self.host = host
        self.port = int(self._server.server_port)

    def close(self) -> None:
        """Stop serving (idempotent)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
