"""Prometheus collectors for the producer and the consumer (optional: needs the ``prometheus-client`` package).

::

    from prometheus_client import start_http_server
    from rill.client import Consumer, Producer
    from rill.client.client_collectors import ConsumerCollector, ProducerCollector

    producer = Producer(bootstrap_servers="localhost:9092", client_id="orders-api")
    consumer = Consumer("orders", group_id="billing", client_id="billing-1")
    ProducerCollector(producer)   # registered with prometheus_client's default REGISTRY
    ConsumerCollector(consumer)
    start_http_server(8000)       # http://localhost:8000/metrics, served by a daemon thread

Like prometheus_client's own ``ProcessCollector``, each collector registers itself with
``registry`` (default: the global ``REGISTRY``; None: not at all, call
``registry.register(collector)`` yourself). One collector reports any number of clients
(``ProducerCollector(p1, p2)``, ``collector.add(p3)``, ``collector.remove(p1)``); each client
needs its own ``client.id`` (and, for consumers, ``client.id`` and group together), since
those are its labels. A second collector of the same kind in one registry is refused
(``ValueError``: the metric names are taken), so add the client to the first one instead.
A client stays reported until removed: a closed producer keeps its final counters, a closed
consumer its counters and no partitions.

Nothing runs on the clients' hot paths: each scrape builds the metric families from the
clients' state at that moment (custom collectors, as prometheus_client calls them). For a
producer that is ``Producer.metrics()`` (thread-safe: a lock held for a few copies). The
consumer is not thread-safe, so a scrape never calls into it: it reads the immutable
``Consumer.metrics_snapshot`` the consumer publishes on its own thread, at most once a
second from poll() and at each ``metrics()`` call
(:mod:`~rill.client.consumer.consumer_snapshot` says how fresh the lag is).

Names follow Prometheus's conventions: ``rill_producer_`` / ``rill_consumer_``, base units
(seconds, bytes), counters ending in ``_total``. Labels: ``client_id`` (and ``group`` for
consumers, empty without one), ``topic`` and ``partition``: never a per-message or
per-request value. docs/clients.md, "Prometheus", lists every metric.

Importing :mod:`rill.client` does not import this module or prometheus_client.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from rill.client.consumer.consumer_snapshot import ConsumerSnapshot, PartitionFigures
from rill.client.producer.metrics import LATENCY_BUCKETS

__all__ = ["ConsumerCollector", "ProducerCollector"]


class ProducerLike(Protocol):
    """What the producer collector needs: :class:`~rill.client.producer.Producer` has it."""

    @property
    def client_id(self) -> str: ...

    def metrics(self) -> Mapping[str, Any]: ...


class ConsumerLike(Protocol):
    """What the consumer collector needs: :class:`~rill.client.consumer.Consumer` has it."""

    @property
    def config(self) -> Mapping[str, Any]: ...

    @property
    def group_id(self) -> str | None: ...

    @property
    def metrics_snapshot(self) -> ConsumerSnapshot | None: ...


ClientT = TypeVar("ClientT")
Families = dict[str, Metric]


class _ClientCollector(Collector, Generic[ClientT]):
    """The clients a collector reports, and the describe/collect frame; subclasses name the metrics."""

    def __init__(self, clients: Iterable[ClientT], registry: CollectorRegistry | None) -> None:
        self._lock = threading.Lock()
        self._clients: list[ClientT] = []
        for client in clients:
            self.add(client)
        if registry is not None:
            registry.register(self)

    def add(self, client: ClientT) -> None:
        """Report ``client`` too (adding it again changes nothing).

        Raises:
            ValueError: another client reported here has the same labels (client id, and group).
        """
        key = self._key(client)
        with self._lock:
            if any(c is client for c in self._clients):
                return
            if any(self._key(c) == key for c in self._clients):
                raise ValueError(f"a client with the labels {key} is reported already: give each one its own "
                                 "client.id (the series of two clients must differ)")
            self._clients.append(client)

    def remove(self, client: ClientT) -> None:
        """Stop reporting ``client`` (not reported: nothing happens)."""
        with self._lock:
            self._clients = [c for c in self._clients if c is not client]

    def describe(self) -> Iterable[Metric]:
        """The metric families without samples: the registry refuses a second collector of the same names."""
        return list(self._families().values())

    def collect(self) -> Iterable[Metric]:
        """The families with a sample set per client, built from each client's state now (the HTTP thread)."""
        families = self._families()
        with self._lock:
            clients = list(self._clients)
        for client in clients:
            self._fill(families, client)
        return list(families.values())

    @abstractmethod
    def _key(self, client: ClientT) -> tuple[str, ...]:
        """The label values that identify ``client`` (two clients with the same are refused)."""

    @abstractmethod
    def _families(self) -> Families:
        """The collector's metric families, empty (by name)."""

    @abstractmethod
    def _fill(self, families: Families, client: ClientT) -> None:
        """Add ``client``'s samples to ``families``."""


Kind = Callable[..., Metric]  # CounterMetricFamily, GaugeMetricFamily or HistogramMetricFamily


def _family(kind: Kind, name: str, documentation: str, labels: Sequence[str]) -> tuple[str, Metric]:
    return name, kind(name, documentation, labels=list(labels))


def _add(families: Families, name: str, labels: Sequence[str], value: float | None) -> None:
    """A sample of a counter or gauge family (None: no sample, the value is unknown)."""
    if value is not None:
        family = families[name]
        assert isinstance(family, (CounterMetricFamily, GaugeMetricFamily))
        family.add_metric(list(labels), value)


# ---------------------------------------------------------------- producer

_PRODUCER = ("client_id",)
_TOPIC = ("client_id", "topic")
# (key in metrics()["topics"][topic], name, help): counters per topic
_PRODUCER_TOPIC_COUNTERS = (
    ("records_sent", "rill_producer_records_sent", "Messages acknowledged (acks=none: written)"),
    ("bytes_sent", "rill_producer_bytes_sent", "Bytes of acknowledged message sets, as sent (after gzip)"),
    ("record_errors", "rill_producer_record_errors", "Messages whose send failed for good"),
    ("record_retries", "rill_producer_record_retries", "Messages sent again after a retriable error, per attempt"),
)
# (key in metrics(), name, help, type, scale)
_PRODUCER_VALUES: tuple[tuple[str, str, str, Kind, float], ...] = (
    ("batches_sent", "rill_producer_batches_sent", "Batches acknowledged (acks=none: written)",
     CounterMetricFamily, 1.0),
    ("requests_sent", "rill_producer_requests_sent", "Produce requests sent (a retry is another request)",
     CounterMetricFamily, 1.0),
    ("requests_in_flight", "rill_producer_requests_in_flight", "Requests of every kind awaiting a response",
     GaugeMetricFamily, 1.0),
    ("buffer_used_bytes", "rill_producer_buffer_used_bytes", "Bytes of messages queued or in flight",
     GaugeMetricFamily, 1.0),
    ("buffer_total_bytes", "rill_producer_buffer_limit_bytes", "buffer.memory: the most bytes queued or in flight",
     GaugeMetricFamily, 1.0),
    ("request_latency_max_ms", "rill_producer_request_latency_max_seconds",
     "The longest produce request latency since the producer started", GaugeMetricFamily, 0.001),
)
_LATENCY = "rill_producer_request_latency_seconds"
_LE = [repr(float(bound)) for bound in LATENCY_BUCKETS] + ["+Inf"]  # the le labels, as prometheus_client writes them


class ProducerCollector(_ClientCollector[ProducerLike]):
    """Prometheus metrics of producers, from ``Producer.metrics()`` at each scrape (see the module docstring).

    ``ProducerCollector(*producers, registry=REGISTRY)``; ``add()`` and ``remove()`` change the set.
    """

    def __init__(self, *producers: ProducerLike, registry: CollectorRegistry | None = REGISTRY) -> None:
        super().__init__(producers, registry)

    def _key(self, client: ProducerLike) -> tuple[str, ...]:
        return (client.client_id,)

    def _families(self) -> Families:
        families = dict(_family(CounterMetricFamily, name, text, _TOPIC) for _, name, text in _PRODUCER_TOPIC_COUNTERS)
        families.update(_family(kind, name, text, _PRODUCER) for _, name, text, kind, _ in _PRODUCER_VALUES)
        families.update([_family(HistogramMetricFamily, _LATENCY, "From a produce request being queued on its "
                                 "connection to its response (none with acks=none)", _PRODUCER)])
        return families

    def _fill(self, families: Families, client: ProducerLike) -> None:
        m = client.metrics()
        client_id = client.client_id
        for topic, counts in m["topics"].items():
            for key, name, _ in _PRODUCER_TOPIC_COUNTERS:
                _add(families, name, (client_id, topic), counts[key])
        for key, name, _, _, scale in _PRODUCER_VALUES:
            value = m[key]
            _add(families, name, (client_id,), None if value is None else value * scale)
        latency = families[_LATENCY]
        assert isinstance(latency, HistogramMetricFamily)
        latency.add_metric([client_id], list(zip(_LE, m["request_latency_buckets_ms"].values())),
                           m["request_latency_sum_ms"] / 1000.0)


# ---------------------------------------------------------------- consumer

_CONSUMER = ("client_id", "group")
_PARTITION = ("client_id", "group", "topic", "partition")
Getter = Callable[[ConsumerSnapshot], float]
# (name, help, type, value, only with a group)
_CONSUMER_VALUES: tuple[tuple[str, str, Kind, Getter, bool], ...] = (
    ("rill_consumer_polls", "poll() calls", CounterMetricFamily, lambda s: s.polls, False),
    ("rill_consumer_records_returned", "Messages returned by poll() and the iterator", CounterMetricFamily,
     lambda s: s.records_returned, False),
    ("rill_consumer_records_buffered", "Messages fetched and not returned yet", GaugeMetricFamily,
     lambda s: s.records_buffered, False),
    ("rill_consumer_fetch_requests", "Fetch requests sent", CounterMetricFamily, lambda s: s.fetch_requests, False),
    ("rill_consumer_fetched_bytes", "Bytes of message data fetched", CounterMetricFamily,
     lambda s: s.bytes_fetched, False),
    ("rill_consumer_assigned_partitions", "Partitions this consumer owns", GaugeMetricFamily,
     lambda s: len(s.partitions), False),
    ("rill_consumer_snapshot_timestamp_seconds", "When the consumer took these figures (seconds since the epoch)",
     GaugeMetricFamily, lambda s: s.taken_at, False),
    ("rill_consumer_rebalances", "Rebalances this member took part in", CounterMetricFamily,
     lambda s: s.rebalances, True),
    ("rill_consumer_commits", "Offset commits the coordinator stored", CounterMetricFamily, lambda s: s.commits, True),
    ("rill_consumer_heartbeats", "Heartbeats sent to the coordinator", CounterMetricFamily,
     lambda s: s.heartbeats, True),
    ("rill_consumer_evictions", "Times the group removed this member", CounterMetricFamily,
     lambda s: s.evictions, True),
    ("rill_consumer_async_commits_pending", "commit_async() calls not answered yet", GaugeMetricFamily,
     lambda s: s.commits_pending, True),
    ("rill_consumer_generation", "The group generation of this member's assignment", GaugeMetricFamily,
     lambda s: s.generation, True),
)
PartitionGetter = Callable[[PartitionFigures], int | None]
# per owned partition, all gauges: (name, help, value)
_PARTITION_VALUES: tuple[tuple[str, str, PartitionGetter], ...] = (
    ("rill_consumer_position", "Offset of the next message poll() returns", lambda p: p.position),
    ("rill_consumer_committed_offset", "Offset this consumer last committed or was given", lambda p: p.committed),
    ("rill_consumer_end_offset", "Log end offset as last known (a lower bound)", lambda p: p.end_offset),
    ("rill_consumer_lag_bytes", "End offset minus position", lambda p: p.lag),
)


class ConsumerCollector(_ClientCollector[ConsumerLike]):
    """Prometheus metrics of consumers, from each one's ``metrics_snapshot`` (see the module docstring).

    ``ConsumerCollector(*consumers, registry=REGISTRY)``; ``add()`` and ``remove()`` change the set.
    A consumer that has published nothing yet (no poll() or metrics() so far) has no samples.
    """

    def __init__(self, *consumers: ConsumerLike, registry: CollectorRegistry | None = REGISTRY) -> None:
        super().__init__(consumers, registry)

    def _key(self, client: ConsumerLike) -> tuple[str, ...]:
        return (str(client.config["client.id"]), client.group_id or "")

    def _families(self) -> Families:
        families = dict(_family(kind, name, text, _CONSUMER) for name, text, kind, _, _ in _CONSUMER_VALUES)
        families.update(_family(GaugeMetricFamily, name, text, _PARTITION) for name, text, _ in _PARTITION_VALUES)
        return families

    def _fill(self, families: Families, client: ConsumerLike) -> None:
        snapshot = client.metrics_snapshot  # one reference, taken once: the figures below are consistent
        if snapshot is None:
            return
        labels = (snapshot.client_id, snapshot.group or "")
        for name, _, _, value, group_only in _CONSUMER_VALUES:
            if snapshot.group is not None or not group_only:
                _add(families, name, labels, value(snapshot))
        for p in snapshot.partitions:
            for name, _, get in _PARTITION_VALUES:
                _add(families, name, (*labels, p.topic, str(p.partition)), get(p))
