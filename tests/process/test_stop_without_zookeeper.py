"""A broker stops on SIGTERM even when its ZooKeeper is gone for good.

A broker holding replicas first asks the controller to move its leaderships away
(controlled shutdown), reading the controller from ZooKeeper. With ZooKeeper gone, a
read queued while kazoo waits to reconnect waited for ever, and so did the process
(seen by a broker left behind by a test whose ZooKeeper had stopped). Each attempt's
reads are bounded now; after ``controlled.shutdown.max.retries`` the broker stops.
"""

from __future__ import annotations

import time
from pathlib import Path

from kazoo.client import KazooClient

from rill.broker.cluster.replicated_topics import create_topic
from tests.process.broker_process import BrokerProcess
from tests.zk import ZkServer


def test_sigterm_stops_a_broker_whose_zookeeper_is_gone(tmp_path: Path) -> None:
    with ZkServer(tmp_path / "zk") as server:
        broker = BrokerProcess(tmp_path / "data", "--zookeeper", server.address, "--broker-id", "1",
                               "--set", "offsets.topic.replication.factor=1", "--set", "zookeeper.session.timeout.ms=4000",
                               "--set", "controlled.shutdown.max.retries=2",
                               "--set", "controlled.shutdown.retry.backoff.ms=200",
                               "--set", "controller.socket.timeout.ms=2000").start()
        zk = KazooClient(hosts=server.address, timeout=10)
        zk.start(timeout=10)
        try:
            create_topic(zk, "held", 1, 1, None, [1])  # a replica here: SIGTERM takes the controlled path
            deadline = time.monotonic() + 30
            while not any(e.get("event") == "replica.became_leader" and e.get("topic") == "held"
                          for e in broker.events()):
                assert time.monotonic() < deadline, "the broker never led its replica"
                time.sleep(0.1)
        finally:
            zk.stop()
            zk.close()
        server.stop()  # ZooKeeper gone for good
    time.sleep(1.0)  # the broker notices the connection drop
    began = time.monotonic()
    try:
        code = broker.terminate(timeout=60)
    finally:
        if broker.proc is not None and broker.proc.poll() is None:
            broker.kill9()  # it hung: end it, the assertion below says so
    took = time.monotonic() - began
    events = [e.get("event") for e in broker.events()]
    assert code == 0 and "broker.stopped" in events, events[-10:]
    print(f"\nstopped {took:.1f} s after SIGTERM, ZooKeeper gone")
    assert took < 30, f"took {took:.1f} s to stop"
