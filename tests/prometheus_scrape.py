"""Scrape metrics as Prometheus would: the text exposition, parsed by prometheus-client's own parser.

``scrape(registry)`` reads a registry in this process (the clients' collectors);
``scrape_broker(broker)`` reads a broker's ``/metrics`` over HTTP (gzipped on request).
"""

from __future__ import annotations

import gzip
import urllib.request
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Every sample of an exposition, by (sample name, sorted labels)."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape(registry: CollectorRegistry) -> Samples:
    """Every sample of the exposition, by (sample name, sorted labels): ``value(samples, name, **labels)`` reads one."""
    return parse(generate_latest(registry).decode())


def broker_exposition(broker: Any, *, gzipped: bool = False) -> str:
    """The text of a running broker's /metrics (``broker.metrics_port``: a RunningBroker or BrokerProcess)."""
    assert broker.metrics_port is not None, "the broker serves no metrics (metrics.port = 0)"
    request = urllib.request.Request(f"http://127.0.0.1:{broker.metrics_port}/metrics",
                                     headers={"Accept-Encoding": "gzip"} if gzipped else {})
    with urllib.request.urlopen(request, timeout=10) as response:
        body = response.read()
        if gzipped:
            assert response.headers.get("Content-Encoding") == "gzip"
            body = gzip.decompress(body)
    return str(body.decode())


def scrape_broker(broker: Any, *, gzipped: bool = False) -> Samples:
    return parse(broker_exposition(broker, gzipped=gzipped))


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The sample ``name`` with exactly these labels (None: absent)."""
    return samples.get((name, tuple(sorted(labels.items()))))


def labelled(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Every sample named ``name``, by its sorted labels."""
    return {labels: v for (n, labels), v in samples.items() if n == name}


def names(samples: Samples) -> set[str]:
    return {name for name, _ in samples}
