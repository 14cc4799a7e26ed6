"""Connection and memory floods against a real ``rill-broker``: idle connections, 100 MiB requests, no descriptors left."""

from __future__ import annotations

import os
import resource
import socket
import struct
import threading
import time
from pathlib import Path

from rill.client.protocol import requests as rq
from rill.client.protocol.messages import encode_message_set
from rill.client.simple import SimpleConsumer

from tests.process.broker_process import BrokerProcess


def _metadata_ms(port: int) -> float:
    start = time.perf_counter()
    with SimpleConsumer("127.0.0.1", port, timeout=60) as client:
        client.metadata()
    return (time.perf_counter() - start) * 1000


def _raise_own_fd_limit(want: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))


def test_thousands_of_idle_connections_cost_little_and_slow_no_one(tmp_path: Path) -> None:
    """5,000 idle connections add under 100 MB of RSS, a new client is served at once, and closing them gives it back."""
    _raise_own_fd_limit(12_000)
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        _metadata_ms(broker.port)
        time.sleep(0.3)
        idle = broker.rss_mb()
        flood = [socket.create_connection(("127.0.0.1", broker.port)) for _ in range(5_000)]
        time.sleep(1.0)
        assert broker.rss_mb() - idle < 100
        assert min(_metadata_ms(broker.port) for _ in range(3)) < 200
        for sock in flood:
            sock.close()
        time.sleep(1.0)
        assert broker.rss_mb() - idle < 40
    finally:
        assert broker.terminate() == 0


def test_concurrent_100_mib_requests_stay_within_the_request_memory_budget(tmp_path: Path) -> None:
    """Six 100 MiB produces at once: every one is acknowledged, RSS grows by about queued.max.request.bytes at most, and returns."""
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        idle = broker.rss_mb()
        payload = os.urandom(900_000)
        frame = rq.encode_produce_ack([rq.ProduceRequest("big", 0, encode_message_set([payload] * 115))])
        assert len(frame) > 100_000_000
        peak, done, errors = [idle], threading.Event(), []

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], broker.rss_mb())
                time.sleep(0.005)

        def send() -> None:
            with socket.create_connection(("127.0.0.1", broker.port), timeout=120) as sock:
                sock.sendall(frame)
                (size,) = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
                _, [ack] = rq.decode_produce_ack_response(sock.recv(size, socket.MSG_WAITALL))
                errors.append(ack.error)

        sampler = threading.Thread(target=sample)
        sampler.start()
        senders = [threading.Thread(target=send) for _ in range(6)]
        for thread in senders:
            thread.start()
        for thread in senders:
            thread.join(180)
        done.set()
        sampler.join()
        assert errors == [0] * 6
        assert peak[0] - idle < 330, (peak[0], idle)  # 200 MiB budget plus the page being handled
        time.sleep(0.5)
        assert broker.rss_mb() - idle < 40
    finally:
        assert broker.terminate() == 0


def test_out_of_descriptors_the_broker_backs_off_logs_little_and_recovers(tmp_path: Path) -> None:
    """With its descriptor limit reached, accept() failures pause the listener and are logged with a count, not per attempt."""
    broker = BrokerProcess(tmp_path / "data", fd_limit=128).start()
    try:
        flood = []
        for _ in range(300):
            try:
                flood.append(socket.create_connection(("127.0.0.1", broker.port), timeout=2))
            except OSError:
                break
        time.sleep(2.0)
        failures = [e for e in broker.events() if e.get("event") == "broker.accept_failed"]
        assert failures and len(failures) <= 5 and failures[0]["error"] == "Too many open files"
        assert broker.log_path.stat().st_size < 200_000
        for sock in flood:
            sock.close()
        deadline = time.monotonic() + 10
        while True:
            try:
                assert _metadata_ms(broker.port) < 5_000
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        assert broker.terminate() == 0
