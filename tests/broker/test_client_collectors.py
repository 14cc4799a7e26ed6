"""The client's Prometheus collectors against a real in-process broker: scraped values equal the truth."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from rill.broker.testing import RunningBroker
from rill.client.client_collectors import ConsumerCollector, ProducerCollector
from rill.client.consumer import Consumer
from rill.client.consumer.consumer_snapshot import SNAPSHOT_INTERVAL
from rill.client.producer import Producer
from rill.client.protocol.messages import Message
from rill.client.simple import SimpleConsumer
from tests.broker.group_consumers import consumer_factory, short_session_broker
from tests.prometheus_scrape import scrape, value


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with short_session_broker(tmp_path, partitions=1) as b:
        with SimpleConsumer(b.host, b.port, timeout=10) as client:
            client.create_topic("t", 1)
        yield b


@pytest.fixture
def consumers(broker: RunningBroker) -> Iterator[Callable[..., Consumer]]:
    yield from consumer_factory(broker, enable_auto_commit=False, auto_offset_reset="earliest")


def produce(broker: RunningBroker, values: list[bytes], flushes: int = 1,
            **settings: object) -> tuple[Producer, int]:
    """Send ``values`` to t-0 in ``flushes`` rounds (a produce request each at least) and wait for every answer;
    the producer (still open) and the log end."""
    producer = Producer(bootstrap_servers=broker.address, **settings)
    step = -(-len(values) // flushes)
    for start in range(0, len(values), step):
        responses = [producer.send("t", v, partition=0) for v in values[start:start + step]]
        producer.flush(10)
    end = responses[-1].get_offset(10) + len(values[-1]) + 10  # the last message's offset plus its size
    deadline = time.monotonic() + 5
    while producer.metrics()["requests_in_flight"] and time.monotonic() < deadline:
        time.sleep(0.01)
    return producer, end


def poll_count(consumer: Consumer, count: int, timeout: float = 15.0, limit: bool = True) -> list[Message]:
    """Poll until ``count`` messages came (``limit``: no more; otherwise max.poll.records a poll)."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(got) < count:
        assert time.monotonic() < deadline, f"got {len(got)} of {count}"
        got.extend(consumer.poll(0.1, max_records=count - len(got) if limit else None))
    return got


def test_scraped_producer_and_consumer_figures_equal_the_truth(broker: RunningBroker, consumers) -> None:
    """Records and bytes sent, the latency histogram's count (one per request), and the consumer's position,
    end offset and lag in bytes (end minus position) as scraped equal what was produced and consumed."""
    values = [f"value-{i:04}".encode() for i in range(500)]
    producer, end = produce(broker, values, flushes=5, client_id="p1")
    c = consumers(client_id="c1", max_poll_records=50)
    c.add_topic("t")
    got = poll_count(c, 120)
    registry = CollectorRegistry()
    ProducerCollector(producer, registry=registry)
    ConsumerCollector(c, registry=registry)
    c.metrics()  # publishes a snapshot with the end offsets it asks for
    s = scrape(registry)
    producer.close()
    p = {"client_id": "p1"}
    assert value(s, "rill_producer_records_sent_total", topic="t", **p) == 500
    assert value(s, "rill_producer_bytes_sent_total", topic="t", **p) == sum(len(v) + 10 for v in values) == end
    requests = value(s, "rill_producer_requests_sent_total", **p)
    assert requests is not None and requests >= 5  # one per flush at least
    assert value(s, "rill_producer_request_latency_seconds_count", **p) == requests
    assert value(s, "rill_producer_request_latency_seconds_bucket", le="+Inf", **p) == requests
    latency_sum = value(s, "rill_producer_request_latency_seconds_sum", **p)
    assert latency_sum is not None and 0 < latency_sum < 10 * requests
    assert value(s, "rill_producer_record_errors_total", topic="t", **p) == 0
    part = {"client_id": "c1", "group": "g", "topic": "t", "partition": "0"}
    position = got[-1].next_offset
    assert value(s, "rill_consumer_position", **part) == position
    assert value(s, "rill_consumer_end_offset", **part) == end
    assert value(s, "rill_consumer_lag_bytes", **part) == end - position
    assert value(s, "rill_consumer_committed_offset", **part) is None  # nothing committed yet
    assert value(s, "rill_consumer_records_returned_total", client_id="c1", group="g") == 120
    assert value(s, "rill_consumer_generation", client_id="c1", group="g") == c.generation >= 1


def test_poll_publishes_positions_and_its_fetches_show_the_log_end(broker: RunningBroker, consumers) -> None:
    """Without metrics(): a poll() after SNAPSHOT_INTERVAL publishes the positions it has returned, and a
    consumer whose fetches reached the log end shows the exact end and lag; a commit shows up too."""
    _, end = produce(broker, [b"x" * 100] * 20)
    c = consumers(client_id="c1", max_poll_records=5)
    c.add_topic("t")
    registry = CollectorRegistry()
    ConsumerCollector(c, registry=registry)
    poll_count(c, 5)
    c.commit()
    time.sleep(SNAPSHOT_INTERVAL * 1.5)
    got = c.poll(5.0)
    assert got and got[-1].next_offset == 10 * 110
    part = {"client_id": "c1", "group": "g", "topic": "t", "partition": "0"}
    s = scrape(registry)
    assert value(s, "rill_consumer_position", **part) == 10 * 110
    assert value(s, "rill_consumer_committed_offset", **part) == 5 * 110
    assert value(s, "rill_consumer_end_offset", **part) == end == 20 * 110  # one fetch read all 20
    assert value(s, "rill_consumer_lag_bytes", **part) == end - 10 * 110
    assert value(s, "rill_consumer_commits_total", client_id="c1", group="g") == 1


def test_a_consumer_behind_its_fetches_sees_a_lower_bound_until_metrics(broker: RunningBroker, consumers) -> None:
    """A consumer that fetched only part of the log knows the end only as far as it read; metrics() asks the
    broker and the next scrape has the exact end and lag."""
    _, end = produce(broker, [b"y" * 990] * 200)  # 200 KB: more than one 16 KB fetch
    c = consumers(client_id="c1", max_poll_records=1, max_partition_fetch_bytes=16_000, fetch_max_bytes=16_000)
    c.add_topic("t")
    registry = CollectorRegistry()
    ConsumerCollector(c, registry=registry)
    poll_count(c, 1)
    time.sleep(SNAPSHOT_INTERVAL * 1.5)
    poll_count(c, 1)
    part = {"client_id": "c1", "group": "g", "topic": "t", "partition": "0"}
    seen = value(scrape(registry), "rill_consumer_end_offset", **part)
    assert seen is not None and 2 * 1000 <= seen <= 2 * 16_000 < end  # what two fetches at most read
    c.metrics()
    s = scrape(registry)
    assert value(s, "rill_consumer_end_offset", **part) == end
    assert value(s, "rill_consumer_lag_bytes", **part) == end - 2 * 1000


def test_scraping_while_poll_runs_never_fails_and_changes_nothing_poll_returns(broker: RunningBroker,
                                                                             consumers) -> None:
    """A thread scraping in a loop while the consumer polls (as Prometheus's HTTP thread would): every scrape
    parses, and poll() returns every message once, in order."""
    values = [f"m{i}".encode() for i in range(30_000)]  # about a second of polls: several snapshots
    producer, end = produce(broker, values)
    producer.close()
    c = consumers(client_id="c1", max_poll_records=5)
    c.add_topic("t")
    registry = CollectorRegistry()
    ConsumerCollector(c, registry=registry)
    stop = threading.Event()
    errors: list[BaseException] = []
    positions: list[float] = []

    def scraper() -> None:
        while not stop.is_set():
            try:
                s = scrape(registry)
            except BaseException as exc:  # noqa: BLE001 - the test reports it
                errors.append(exc)
                return
            position = value(s, "rill_consumer_position", client_id="c1", group="g", topic="t", partition="0")
            if position is not None:
                positions.append(position)

    thread = threading.Thread(target=scraper)
    thread.start()
    try:
        got = poll_count(c, len(values), timeout=60, limit=False)  # 5 a poll
    finally:
        stop.set()
        thread.join(10)
    assert errors == []
    assert [m.value for m in got] == values
    assert len(positions) > 10 and positions == sorted(positions) and positions[0] < end  # seen while polling


def test_a_closed_consumer_keeps_its_counters_and_reports_no_partition(broker: RunningBroker, consumers) -> None:
    """close() publishes a last snapshot: the counters stay, the partitions (no longer owned) go."""
    produce(broker, [b"z"] * 3)
    c = consumers(client_id="c1")
    c.add_topic("t")
    registry = CollectorRegistry()
    ConsumerCollector(c, registry=registry)
    poll_count(c, 3)
    c.close()
    s = scrape(registry)
    assert value(s, "rill_consumer_records_returned_total", client_id="c1", group="g") == 3
    assert value(s, "rill_consumer_assigned_partitions", client_id="c1", group="g") == 0
    assert not [name for name, _ in s if name.startswith("rill_consumer_position")]
