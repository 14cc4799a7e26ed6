"""Scrape a prometheus_client registry as Prometheus would: the text exposition, parsed by its own parser."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(registry: CollectorRegistry) -> Samples:
    """Every sample of the exposition, by (sample name, sorted labels): ``value(samples, name, **labels)`` reads one."""
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The sample ``name`` with exactly these labels (None: absent)."""
    return samples.get((name, tuple(sorted(labels.items()))))


def names(samples: Samples) -> set[str]:
    return {name for name, _ in samples}
