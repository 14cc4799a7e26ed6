"""The client's Prometheus collectors, over stand-in clients: names, types, labels and values in the exposition."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from rill.client.client_collectors import ConsumerCollector, ProducerCollector
from rill.client.consumer.consumer_snapshot import ConsumerSnapshot, PartitionFigures
from rill.client.producer.metrics import ProducerMetrics
from tests.prometheus_scrape import names, scrape, value


class StandInProducer:
    """A Producer's metrics() from a real ProducerMetrics, without a send thread."""

    def __init__(self, client_id: str, used: int = 0, total: int = 1000) -> None:
        self.client_id = client_id
        self.counts = ProducerMetrics()
        self.used, self.total = used, total

    def metrics(self) -> dict[str, Any]:
        return self.counts.snapshot(self.used, self.total)


class StandInConsumer:
    """What the collector reads of a Consumer: its settings, group and published snapshot."""

    def __init__(self, client_id: str, group: str | None, snapshot: ConsumerSnapshot | None = None) -> None:
        self.config = {"client.id": client_id}
        self.group_id = group
        self.metrics_snapshot = snapshot


def snapshot(client_id: str = "c1", group: str | None = "g",
             partitions: tuple[PartitionFigures, ...] = ()) -> ConsumerSnapshot:
    return ConsumerSnapshot(client_id, group, 1_700_000_000.5, polls=7, records_returned=70, records_buffered=3,
                            fetch_requests=5, bytes_fetched=900, rebalances=2, commits=4, heartbeats=9, evictions=1,
                            commits_pending=1, generation=3, partitions=partitions)


def test_producer_counters_gauges_and_latency_histogram() -> None:
    """Each figure of metrics() is a sample of its metric: per-topic counters, totals, gauges in base units,
    and the latency histogram's cumulative buckets, count and sum in seconds."""
    p = StandInProducer("p1", used=30, total=100)
    m = p.counts
    m.acknowledged("a", 3, 60)
    m.acknowledged("b", 1, 20)
    m.failed("a", 2)
    m.retried("b", 1)
    for latency in (0.002, 0.2, 0.2):
        m.request_sent()
        m.answered(latency)
    m.requests_in_flight = 1
    registry = CollectorRegistry()
    ProducerCollector(p, registry=registry)
    s = scrape(registry)
    assert value(s, "rill_producer_records_sent_total", client_id="p1", topic="a") == 3
    assert value(s, "rill_producer_records_sent_total", client_id="p1", topic="b") == 1
    assert value(s, "rill_producer_bytes_sent_total", client_id="p1", topic="a") == 60
    assert value(s, "rill_producer_record_errors_total", client_id="p1", topic="a") == 2
    assert value(s, "rill_producer_record_retries_total", client_id="p1", topic="b") == 1
    assert value(s, "rill_producer_batches_sent_total", client_id="p1") == 2
    assert value(s, "rill_producer_requests_sent_total", client_id="p1") == 3
    assert value(s, "rill_producer_requests_in_flight", client_id="p1") == 1
    assert value(s, "rill_producer_buffer_used_bytes", client_id="p1") == 30
    assert value(s, "rill_producer_buffer_limit_bytes", client_id="p1") == 100
    assert value(s, "rill_producer_request_latency_max_seconds", client_id="p1") == pytest.approx(0.2)
    latency = "rill_producer_request_latency_seconds"
    assert value(s, f"{latency}_count", client_id="p1") == 3
    assert value(s, f"{latency}_sum", client_id="p1") == pytest.approx(0.402)
    assert [value(s, f"{latency}_bucket", client_id="p1", le=le) for le in ("0.001", "0.0025", "0.1", "0.25", "+Inf")
            ] == [0, 1, 1, 3, 3]


def test_a_producer_before_its_first_answer_has_no_latency_max_but_an_empty_histogram() -> None:
    """No answer yet: no max latency sample, a histogram of count 0, and no per-topic counter."""
    registry = CollectorRegistry()
    ProducerCollector(StandInProducer("p1"), registry=registry)
    s = scrape(registry)
    assert value(s, "rill_producer_request_latency_max_seconds", client_id="p1") is None
    assert value(s, "rill_producer_request_latency_seconds_count", client_id="p1") == 0
    assert not any(name.startswith("rill_producer_records_sent") for name in names(s))  # no topic yet


def test_consumer_counters_gauges_and_partitions_come_from_its_snapshot() -> None:
    """Counters, gauges and per-partition figures are the snapshot's; an unknown figure (None) has no sample."""
    parts = (PartitionFigures("t", 0, 100, 80, 400, 300), PartitionFigures("t", 1, None, None, None, None))
    registry = CollectorRegistry()
    ConsumerCollector(StandInConsumer("c1", "g", snapshot(partitions=parts)), registry=registry)
    s = scrape(registry)
    c = {"client_id": "c1", "group": "g"}
    assert [value(s, f"rill_consumer_{n}_total", **c) for n in ("polls", "records_returned", "fetch_requests",
            "fetched_bytes", "rebalances", "commits", "heartbeats", "evictions")] == [7, 70, 5, 900, 2, 4, 9, 1]
    assert [value(s, f"rill_consumer_{n}", **c) for n in ("records_buffered", "async_commits_pending", "generation",
                                                          "assigned_partitions")] == [3, 1, 3, 2]
    assert value(s, "rill_consumer_snapshot_timestamp_seconds", **c) == 1_700_000_000.5
    p0 = {**c, "topic": "t", "partition": "0"}
    assert [value(s, f"rill_consumer_{n}", **p0) for n in ("position", "committed_offset", "end_offset",
                                                           "lag_bytes")] == [100, 80, 400, 300]
    p1 = {**c, "topic": "t", "partition": "1"}
    assert [value(s, f"rill_consumer_{n}", **p1) for n in ("position", "committed_offset", "end_offset",
                                                           "lag_bytes")] == [None, None, None, None]


def test_a_consumer_without_a_group_has_an_empty_group_label_and_no_group_metrics() -> None:
    """Without group.id the group label is empty and the group's counters and generation are left out."""
    registry = CollectorRegistry()
    ConsumerCollector(StandInConsumer("solo", None, snapshot("solo", None)), registry=registry)
    s = scrape(registry)
    assert value(s, "rill_consumer_polls_total", client_id="solo", group="") == 7  # Prometheus: no group label
    assert not {"rill_consumer_rebalances_total", "rill_consumer_generation"} & names(s)


def test_a_consumer_that_published_nothing_yet_has_no_samples() -> None:
    """Before its first poll() or metrics() a consumer has no snapshot, so no sample (and no error)."""
    registry = CollectorRegistry()
    ConsumerCollector(StandInConsumer("c1", "g"), registry=registry)
    assert scrape(registry) == {}


def test_several_clients_in_one_collector_each_with_their_labels() -> None:
    """One collector reports every client added (labels tell them apart) until it is removed; adding a client
    twice changes nothing; a second client with the same labels is refused."""
    registry = CollectorRegistry()
    first, second = StandInConsumer("c1", "g", snapshot("c1")), StandInConsumer("c2", "g", snapshot("c2"))
    collector = ConsumerCollector(first, registry=registry)
    collector.add(second)
    collector.add(first)
    polls = {labels: v for (name, labels), v in scrape(registry).items() if name == "rill_consumer_polls_total"}
    assert polls == {(("client_id", "c1"), ("group", "g")): 7, (("client_id", "c2"), ("group", "g")): 7}
    with pytest.raises(ValueError, match="client.id"):
        collector.add(StandInConsumer("c1", "g"))
    collector.add(StandInConsumer("c1", "other-group"))  # another group: other labels
    collector.remove(first)
    assert value(scrape(registry), "rill_consumer_polls_total", client_id="c1", group="g") is None
    producers = ProducerCollector(StandInProducer("p1"), registry=None)
    with pytest.raises(ValueError, match="client.id"):
        producers.add(StandInProducer("p1"))


def test_a_second_collector_of_a_kind_in_one_registry_is_refused() -> None:
    """The registry knows the metric names (describe()), so two collectors cannot write the same families; the
    producer's and the consumer's do not clash. registry=None registers nowhere."""
    registry = CollectorRegistry()
    first = ProducerCollector(StandInProducer("p1"), registry=registry)
    ConsumerCollector(StandInConsumer("c1", "g"), registry=registry)
    with pytest.raises(ValueError, match="Duplicated"):
        ProducerCollector(StandInProducer("p2"), registry=registry)
    unregistered = ProducerCollector(StandInProducer("p3"), registry=None)
    assert value(scrape(registry), "rill_producer_buffer_limit_bytes", client_id="p3") is None
    registry.unregister(first)
    registry.register(unregistered)
    assert value(scrape(registry), "rill_producer_buffer_limit_bytes", client_id="p3") == 1000


def test_names_follow_prometheus_conventions_and_docs_list_every_metric() -> None:
    """rill_producer_/rill_consumer_ prefixes, counters end in _total; docs/clients.md's Prometheus table names
    every metric the collectors describe, and nothing else."""
    described = {m.name: m.type for c in (ProducerCollector(registry=None), ConsumerCollector(registry=None))
                 for m in c.describe()}
    assert all(n.startswith(("rill_producer_", "rill_consumer_")) for n in described)
    exposed = {n + "_total" if t == "counter" else n for n, t in described.items()}
    doc = (Path(__file__).parents[2] / "docs" / "clients.md").read_text()
    section = doc[doc.index("### Prometheus"):]
    section = section[:section.index("\n## ")] if "\n## " in section else section
    table = {line.split("`")[1] for line in section.splitlines() if line.startswith("| `rill_")}
    assert table == exposed


def test_importing_the_client_does_not_import_prometheus_client() -> None:
    """The library stays light for applications that do not ask for the collectors."""
    code = ("import sys, rill.client, rill.client.producer, rill.client.consumer; "
            "from rill.client import Consumer, Producer; "
            "assert 'prometheus_client' not in sys.modules, 'imported'; "
            "import rill.client.client_collectors; assert 'prometheus_client' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
