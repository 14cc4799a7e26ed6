"""Topic floods against a real ``rill-broker``: descriptors, stalls, kill -9 mid-creation, 100,000 partitions."""

from __future__ import annotations

import os
import statistics
import threading
import time
from pathlib import Path

import grpc
import pytest

from rill.client.protocol import requests as rq
from rill.client.simple import SimpleConsumer, SimpleProducer
from rill.v1 import admin_pb2 as apb
from rill.v1 import admin_pb2_grpc as apb_grpc
from rill.v1 import coordinator_pb2 as pb

from tests.conftest import RawClient
from tests.process.broker_process import BrokerProcess


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class LatencyProbe(threading.Thread):
    """A well-behaved client asking for a log end every 10 ms; records each round trip and every error."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self._done = threading.Event()

    def run(self) -> None:
        with SimpleConsumer("127.0.0.1", self.port, timeout=120) as client:
            while not self._done.is_set():
                start = time.perf_counter()
                try:
                    client.latest_offset("steady", 0)
                except Exception as exc:  # noqa: BLE001 - every failure is a finding
                    self.errors.append(repr(exc))
                self.latencies.append(time.perf_counter() - start)
                time.sleep(0.01)

    def stop(self) -> None:
        self._done.set()
        self.join(30)


def test_topic_flood_through_both_planes_stalls_no_one(tmp_path: Path) -> None:
    """10,000 + 10,000 partitions created over the data plane and gRPC: another client never waits 0.5 s, descriptors stay flat."""
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        pid = broker.proc.pid
        with SimpleProducer("127.0.0.1", broker.port) as producer:
            producer.send("steady", [b"s"], 0)
        idle = descriptors(pid)
        probe = LatencyProbe(broker.port)
        probe.start()
        time.sleep(0.3)
        with SimpleConsumer("127.0.0.1", broker.port, timeout=300) as client:
            assert client.create_topic("flood", 10_000) == 10_000
        with grpc.insecure_channel(f"127.0.0.1:{broker.grpc_port}") as channel:
            admin = apb_grpc.AdminStub(channel)
            assert admin.CreateTopic(apb.CreateTopicRequest(topic="over", partitions=10_001),
                                     timeout=60).error_code == pb.INVALID_PARTITIONS
            assert admin.CreateTopic(apb.CreateTopicRequest(topic="flood2", partitions=10_000),
                                     timeout=300).error_code == pb.NONE
        time.sleep(0.3)
        probe.stop()
        assert probe.errors == []
        usual = statistics.median(probe.latencies)
        assert max(probe.latencies) < usual + 0.5, (max(probe.latencies), usual)
        assert descriptors(pid) < idle + 50
        with SimpleProducer("127.0.0.1", broker.port) as producer:
            ack = producer.send("flood2", [b"last"], 9_999)
        assert ack.error == 0
        start = time.monotonic()
        assert broker.terminate() == 0
        stop_s = time.monotonic() - start
        assert stop_s < 20
        again = BrokerProcess(tmp_path / "data").start(timeout=120)
        try:
            assert descriptors(again.proc.pid) < idle + 50
            with SimpleConsumer("127.0.0.1", again.port) as client:
                assert client.latest_offset("flood2", 9_999) == ack.next_offset
        finally:
            assert again.terminate() == 0
    finally:
        if broker.proc and broker.proc.poll() is None:
            broker.kill9()


def test_kill_9_during_a_large_creation_leaves_no_partial_topic(tmp_path: Path) -> None:
    """A broker killed while creating 10,000 partitions comes back without the topic, logging its removal by name."""
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    client = RawClient("127.0.0.1", broker.port)
    client.send(rq.encode_create_topic("half", 10_000))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and sum(1 for n in os.listdir(data) if n.startswith("half-")) < 500:
        time.sleep(0.005)
    made = sum(1 for n in os.listdir(data) if n.startswith("half-"))
    broker.kill9()
    client.close()
    assert 0 < made < 10_000, made  # killed in the middle
    again = BrokerProcess(data).start(timeout=120)
    try:
        removed = [e for e in again.events() if e.get("event") == "logs.incomplete_topic_removed"]
        assert [e["topic"] for e in removed] == ["half"]
        assert not [n for n in os.listdir(data) if n.startswith("half-")]
        with SimpleConsumer("127.0.0.1", again.port) as c:
            assert "half" not in c.topics()
            assert c.create_topic("half", 10_000) == 10_000  # and it can be made again
    finally:
        assert again.terminate() == 0


@pytest.mark.slow
def test_a_broker_with_100_000_partitions_starts_serves_and_stops(tmp_path: Path) -> None:
    """100,000 partitions (10 topics x 10,000): the broker serves, stops cleanly and starts again with few descriptors."""
    data = tmp_path / "data"
    broker = BrokerProcess(data, "--set", "max.broker.partitions=100000").start()
    try:
        with SimpleConsumer("127.0.0.1", broker.port, timeout=600) as client:
            for k in range(10):
                assert client.create_topic(f"t{k}", 10_000) == 10_000
        assert descriptors(broker.proc.pid) < 200
        with SimpleProducer("127.0.0.1", broker.port) as producer:
            acks = [producer.send(f"t{k}", [b"m%d" % k], 9_999 - k) for k in range(10)]
        assert all(a.error == 0 for a in acks)
        assert broker.terminate(timeout=120) == 0
        again = BrokerProcess(data, "--set", "max.broker.partitions=100000").start(timeout=300)
        try:
            assert descriptors(again.proc.pid) < 200
            with SimpleConsumer("127.0.0.1", again.port) as client:
                for k in range(10):
                    [message] = client.fetch(f"t{k}", 9_999 - k, 0)
                    assert message.value == b"m%d" % k
                assert len(client.topics()) == 10
        finally:
            assert again.terminate(timeout=120) == 0
    finally:
        if broker.proc and broker.proc.poll() is None:
            broker.kill9()

