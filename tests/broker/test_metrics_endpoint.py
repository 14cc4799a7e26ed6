"""A broker's /metrics under a known load: every number compared with the truth.

Each test runs a real in-process broker with ``metrics.port = -1``, drives it with rill's
own clients, scrapes ``/metrics`` over HTTP as Prometheus would and parses the text with
prometheus-client's parser (so the exposition is valid text format).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from rill.broker.testing import RunningBroker, running_broker
from rill.client.admin import AdminClient
from rill.client.consumer import Consumer
from rill.client.producer import Producer
from rill.client.errors import ErrorCode
from rill.client.protocol import requests as rq
from rill.client.simple import SimpleConsumer, SimpleProducer
from rill.v1 import admin_pb2 as apb
from tests.conftest import RawClient
from tests.prometheus_scrape import Samples, broker_exposition, scrape_broker, value
from tests.security.grpc_acls import secured_broker

def scrape_when(broker: RunningBroker, name: str, expected: float, **labels: str) -> Samples:
    """A scrape once ``name`` reaches ``expected``: a response is counted when its last byte is written, just
    after the client may have read it (bounded: 5 s)."""
    deadline = time.monotonic() + 5
    while True:
        samples = scrape_broker(broker)
        if value(samples, name, **labels) == expected or time.monotonic() > deadline:
            return samples
        time.sleep(0.02)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with running_broker(tmp_path, num_partitions=2) as b:
        yield b


def test_counters_equal_what_was_produced_and_fetched(broker: RunningBroker) -> None:
    """Messages and bytes in per topic, log end offsets, bytes out and request counts equal the truth;
    the latency histograms hold one observation per request."""
    with SimpleProducer(broker.host, broker.port) as producer:  # 30 PRODUCE_ACK requests of 10 messages
        for i in range(30):
            producer.send("metered", [f"message-{i:02d}-{j}".encode() for j in range(10)], partition=i % 2)
    with SimpleConsumer(broker.host, broker.port) as client:
        ends = [client.latest_offset("metered", p) for p in (0, 1)]
        fetched = sum(client.fetch("metered", p, 0, 1 << 20)[-1].next_offset for p in (0, 1))
    samples = scrape_when(broker, "rill_requests_total", 2, type="FETCH_WAIT", error="NONE")
    assert value(samples, "rill_topic_messages_in_total", topic="metered") == 300
    assert value(samples, "rill_topic_bytes_in_total", topic="metered") == sum(ends)
    for p, end in enumerate(ends):
        assert value(samples, "rill_log_end_offset_bytes", topic="metered", partition=str(p)) == end
        assert value(samples, "rill_log_start_offset_bytes", topic="metered", partition=str(p)) == 0
        assert value(samples, "rill_log_size_bytes", topic="metered", partition=str(p)) == end
    assert fetched == sum(ends)
    assert value(samples, "rill_topic_bytes_out_total", topic="metered") == fetched
    produced = value(samples, "rill_requests_total", type="PRODUCE_ACK", error="NONE")
    assert produced == 30
    assert value(samples, "rill_requests_total", type="FETCH_WAIT", error="NONE") == 2
    for phase in ("queue", "local", "response_send", "total"):
        assert value(samples, f"rill_request_{phase}_seconds_count", type="PRODUCE_ACK") == produced
        assert value(samples, f"rill_request_{phase}_seconds_bucket", type="PRODUCE_ACK", le="+Inf") == produced
    assert value(samples, "rill_request_total_seconds_sum", type="PRODUCE_ACK") > 0
    assert value(samples, "rill_connections", listener="PLAINTEXT") >= 0
    assert value(samples, "process_open_fds") > 0


def test_error_codes_are_counted_by_name(broker: RunningBroker) -> None:
    """A 0.7 FETCH at an offset inside a message is answered OFFSET_OUT_OF_RANGE, and counted so."""
    with Producer(bootstrap_servers=broker.address, acks="append") as producer:
        producer.send("errors", b"a message long enough", partition=0).get(10)
    raw = RawClient(broker.host, broker.port)
    try:
        good = raw.request(rq.encode_fetch("errors", 0, 0, 1024))
        bad = raw.request(rq.encode_fetch("errors", 0, 3, 1024))
    finally:
        raw.close()
    assert int.from_bytes(good[:2], "big") == 0
    assert int.from_bytes(bad[:2], "big") == ErrorCode.OFFSET_OUT_OF_RANGE
    samples = scrape_when(broker, "rill_requests_total", 1, type="FETCH", error="OFFSET_OUT_OF_RANGE")
    assert value(samples, "rill_requests_total", type="FETCH", error="OFFSET_OUT_OF_RANGE") == 1
    assert value(samples, "rill_requests_total", type="FETCH", error="NONE") == 1


def test_long_polls_are_timed_as_remote(broker: RunningBroker) -> None:
    """A fetch parked until data arrives shows its wait as remote time, not local time."""
    with SimpleConsumer(broker.host, broker.port) as client:
        client.create_topic("parked", 1)
        def produce() -> None:
            with SimpleProducer(broker.host, broker.port) as producer:
                producer.send("parked", [b"late"], partition=0)
        produce_later = threading.Timer(0.6, produce)
        produce_later.start()
        started = time.monotonic()
        results = client.fetch_wait([rq.FetchRequest("parked", 0, 0, 1024)], max_wait_ms=5000)
        waited = time.monotonic() - started
        produce_later.join()
    assert results and 0.5 < waited < 5
    samples = scrape_when(broker, "rill_request_remote_seconds_count", 1, type="FETCH_WAIT")
    remote = value(samples, "rill_request_remote_seconds_sum", type="FETCH_WAIT")
    local = value(samples, "rill_request_local_seconds_sum", type="FETCH_WAIT")
    assert remote > 0.1 > local


def test_group_lag_equals_the_truth(broker: RunningBroker) -> None:
    """A group that committed part of a partition: committed offset, lag in bytes (end - committed) and in
    seconds (how long ago the message at the committed offset was appended); members, state, generation."""
    first_sent = time.time()  # message 5 was appended between these two times
    with Producer(bootstrap_servers=broker.address, acks="append") as producer:
        for i in range(10):
            producer.send("lagging", f"m{i}".encode(), partition=0).get(10)
    appended = time.time()
    with SimpleConsumer(broker.host, broker.port) as client:
        end = client.latest_offset("lagging", 0)
        messages = list(client.fetch("lagging", 0, 0, 1 << 20))
    committed = messages[4].next_offset  # five consumed, five to go
    admin = AdminClient(broker.grpc_address)
    try:
        admin.create_group("laggards", ["lagging"])
        admin.commit("laggards", [("lagging", 0, committed)])
    finally:
        admin.close()
    time.sleep(1.1)
    scraped_from = time.time()
    samples = scrape_broker(broker)
    scraped_by = time.time()
    key = {"group": "laggards", "topic": "lagging", "partition": "0"}
    assert value(samples, "rill_group_committed_offset_bytes", **key) == committed
    assert value(samples, "rill_group_lag_bytes", **key) == end - committed
    lag_seconds = value(samples, "rill_group_lag_seconds", **key)
    assert lag_seconds is not None
    # the append time of message 5, as the time index keeps it (milliseconds), read at scrape time
    assert scraped_from - appended - 0.001 <= lag_seconds <= scraped_by - first_sent + 0.001
    assert lag_seconds >= 1.0  # the 1.1 s waited, not 0 (a group at the log end)
    assert value(samples, "rill_group_members", group="laggards") == 0
    assert value(samples, "rill_group_state", group="laggards", state="Empty") == 1
    assert value(samples, "rill_group_state", group="laggards", state="Stable") == 0
    # the lag moves with the log: five more messages, the lag in bytes grows by their size
    with Producer(bootstrap_servers=broker.address, acks="append") as producer:
        for i in range(5):
            producer.send("lagging", f"n{i}".encode(), partition=0).get(10)
    with SimpleConsumer(broker.host, broker.port) as client:
        grown = client.latest_offset("lagging", 0)
    assert value(scrape_broker(broker), "rill_group_lag_bytes", **key) == grown - committed


def test_a_live_group_shows_members_generation_and_rebalances(broker: RunningBroker) -> None:
    with Producer(bootstrap_servers=broker.address, acks="append") as producer:
        producer.send("live", b"x", partition=0).get(10)
    with Consumer("live", bootstrap_servers=broker.address, group_id="live-group",
                  auto_offset_reset="earliest") as consumer:
        deadline = time.monotonic() + 15
        while not consumer.poll(0.2) and time.monotonic() < deadline:
            pass
        generation = consumer.generation
        samples = scrape_broker(broker)
    assert value(samples, "rill_group_members", group="live-group") == 1
    assert value(samples, "rill_group_state", group="live-group", state="Stable") == 1
    assert value(samples, "rill_group_generation", group="live-group") == generation
    assert value(samples, "rill_group_rebalances_total", group="live-group") >= 1


def test_grpc_calls_are_counted_by_method_and_code(broker: RunningBroker) -> None:
    admin = AdminClient(broker.grpc_address)
    try:
        for _ in range(3):
            admin.list_groups()
        admin.describe_topics()
    finally:
        admin.close()
    samples = scrape_broker(broker)
    assert value(samples, "rill_grpc_requests_total", method="/rill.v1.GroupCoordinator/ListGroups", code="OK") == 3
    assert value(samples, "rill_grpc_request_seconds_count", method="/rill.v1.GroupCoordinator/ListGroups") == 3
    assert value(samples, "rill_grpc_requests_total", method="/rill.v1.Admin/DescribeTopics", code="OK") == 1


@pytest.mark.parametrize("kind", ["sync", "aio"])
def test_refused_grpc_calls_carry_their_status(tmp_path: Path, kind: str) -> None:
    """An anonymous call to a broker with authorizer.enable is PERMISSION_DENIED, counted under that code
    by either gRPC server."""
    with secured_broker(tmp_path, kind) as secured:
        refused = secured.call(None, "Admin", "CreateTopic", apb.CreateTopicRequest(topic="t", partitions=1))
        assert isinstance(refused, grpc.RpcError)
        described = secured.call("admin", "Admin", "DescribeTopics", apb.DescribeTopicsRequest())
        samples = scrape_broker(secured.broker)
    assert value(samples, "rill_grpc_requests_total", method="/rill.v1.Admin/CreateTopic",
                 code=refused.code().name) == 1
    assert refused.code().name in ("PERMISSION_DENIED", "UNAUTHENTICATED")
    if isinstance(described, apb.DescribeTopicsResponse):
        assert value(samples, "rill_grpc_requests_total", method="/rill.v1.Admin/DescribeTopics", code="OK") == 1


def test_the_exposition_is_served_gzipped_and_names_follow_prometheus(broker: RunningBroker) -> None:
    """Gzip on request; every rill family has the rill_ prefix; counters end in _total; no _created series;
    no label names a connection, a client or a member."""
    with Producer(bootstrap_servers=broker.address, acks="append") as producer:
        producer.send("named", b"x").get(10)
    samples = scrape_broker(broker, gzipped=True)
    names = {name for name, _ in samples}
    assert not [n for n in names if n.endswith("_created")]
    rill_names = {n for n in names if n.startswith("rill_")}
    assert "rill_requests_total" in rill_names and "rill_log_flush_seconds_count" in rill_names
    labels = {k for (_, ls) in samples for k, _ in ls}
    assert not labels & {"client_id", "member", "consumer_id", "connection", "peer", "host"}


def test_metrics_port_zero_serves_nothing_and_counts_nothing(tmp_path: Path) -> None:
    with running_broker(tmp_path, metrics_port=0) as b:
        assert b.metrics_port is None
        assert b.broker.handlers.metrics is None
        assert b.broker.coordination.call_metrics is None


def test_a_taken_metrics_port_stops_the_start_with_a_clear_error(tmp_path: Path, broker: RunningBroker) -> None:
    with pytest.raises(RuntimeError, match="cannot serve metrics on .*metrics.port"):
        with running_broker(tmp_path / "second", metrics_port=broker.metrics_port):
            pass


def test_every_metric_is_documented_and_every_documented_one_exists(broker: RunningBroker) -> None:
    """docs/operations.md's table lists exactly the rill_ families a broker exposes."""
    families = {f.name for f in text_string_to_metric_families(broker_exposition(broker))}
    exposed = {name for name in families if name.startswith("rill_")}
    table = (Path(__file__).parents[2] / "docs" / "operations.md").read_text().split("## Metrics", 1)[1]
    documented = {name.removesuffix("_total") for name in re.findall(r"^\| `(rill_[a-z_]+)`", table, re.M)}
    assert exposed == documented


def test_the_log_dir_disk_is_measured(broker: RunningBroker) -> None:
    samples = scrape_broker(broker)
    free, total = value(samples, "rill_log_dir_free_bytes"), value(samples, "rill_log_dir_total_bytes")
    fs = os.statvfs(broker.broker.logs.data_dir)
    assert 0 < free <= total == fs.f_blocks * fs.f_frsize
