"""``rill-broker --zookeeper`` as a real process registers, refuses a duplicate id, and unregisters on SIGTERM."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from tests.process.broker_process import BrokerProcess


@pytest.mark.slow
def test_broker_process_registers_in_zookeeper(tmp_path: Path, zk_connect: str) -> None:
    """The real broker with --zookeeper registers its id, a duplicate exits with 1, and SIGTERM removes the node."""
    zk = KazooClient(hosts=zk_connect, timeout=10)
    zk.start(timeout=10)
    proc = BrokerProcess(tmp_path / "data", "--zookeeper", zk_connect, "--broker-id", "3",
                         "--set", "advertised.host.name=127.0.0.1").start()
    try:
        value = zk.get("/brokers/ids/3")[0].decode()
        assert value.split(":")[1:] == ["127.0.0.1", str(proc.port)]
        dup = subprocess.run(
            [sys.executable, "-m", "rill.broker.main", "--data-dir", str(tmp_path / "dup"), "--port", "0",
             "--grpc-port", "0", "--metrics-port", "0", "--host", "127.0.0.1", "--zookeeper", zk_connect,
             "--broker-id", "3",
             "--set", "zookeeper.session.timeout.ms=1500", "--log-format", "json"],
            capture_output=True, timeout=60)
        assert dup.returncode == 1, dup.stderr.decode()
        assert b"broker id 3 is already registered" in dup.stderr
        assert proc.terminate() == 0
        deadline = time.monotonic() + 10
        while zk.exists("/brokers/ids/3") is not None:
            assert time.monotonic() < deadline, "/brokers/ids/3 still there after SIGTERM"
            time.sleep(0.05)
    finally:
        if proc.proc is not None and proc.proc.poll() is None:
            proc.terminate()
        zk.stop()
        zk.close()
