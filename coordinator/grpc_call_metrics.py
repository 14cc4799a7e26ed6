"""What the gRPC servers count per call: calls by method and status code, and latency by method.

Recorded by the logging interceptors (rill.coordinator.grpc_server, rill.coordinator.aio_server)
when a call ends, from gRPC's worker threads, hence the lock; read by the broker's metrics
collector at scrape time (``rill_grpc_requests_total``, ``rill_grpc_request_seconds``).
Methods are gRPC's full names (``/rill.v1.GroupCoordinator/Heartbeat``): a fixed set.
"""

from __future__ import annotations

import threading

from rill.client.bucket_histogram import LATENCY_BUCKETS, LockedHistogram

__all__ = ["GrpcCallMetrics"]


class GrpcCallMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: dict[tuple[str, str], int] = {}
        self.latency: dict[str, LockedHistogram] = {}

    def observe(self, method: str, code: str, seconds: float) -> None:
        """A call of ``method`` ended with status ``code`` (a grpc.StatusCode name) after ``seconds``."""
        with self._lock:
            key = (method, code)
            self.calls[key] = self.calls.get(key, 0) + 1
            histogram = self.latency.get(method)
            if histogram is None:
                histogram = self.latency[method] = LockedHistogram(LATENCY_BUCKETS)
        histogram.observe(seconds)

    def snapshot(self) -> tuple[dict[tuple[str, str], int], dict[str, LockedHistogram]]:
        with self._lock:
            return dict(self.calls), dict(self.latency)
