"""SIGTERM to every broker of a three-broker cluster at once: all of them stop promptly.

Seen running docs/cluster.md (3 of 4 tries took about 30 s): while the brokers'
controlled shutdowns crossed, the controller sent a LeaderAndIsr to a broker whose event
loop had just stopped; its handler waited the whole ``APPLY_TIMEOUT_S`` (30 s) for the
loop, so the process exited 30 s after ``broker.stopped`` (``rpc.slow ms=30002``), and
the other brokers' controlled shutdowns timed out against it. Work posted to a stopped
loop now fails at once and the LeaderAndIsr answers UNAVAILABLE; a ControlledShutdown
reaching a broker whose controller has closed answers NOT_CONTROLLER at once.

The groups topic has its default 50 partitions here (docs/cluster.md's size): with the
test clusters' 3 the brokers stop too fast for the LeaderAndIsr to land in the window
between a loop's stop and its gRPC server's (before the fix this failed 1 run of 2 with
50, 0 of 1 with 3).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from kazoo.client import KazooClient

from tests.process.replicated_cluster import BROKERS, Cluster

STOP_WITHIN_S = 15.0


def test_sigterm_to_every_broker_at_once_stops_them_all_promptly(tmp_path: Path, zk_connect: str,
                                                                  zk: KazooClient) -> None:
    """All three exit 0 with ``broker.stopped`` within 15 s, and no RPC handler outlives its broker's loop."""
    cluster = Cluster(tmp_path, zk_connect, zk, **{"offsets.topic.num.partitions": 50,
                                                   "offsets.topic.replication.factor": 3})
    try:
        cluster.start_all()
        cluster.create()
        began = time.monotonic()
        for broker_id in BROKERS:
            os.kill(cluster.pid(broker_id), signal.SIGTERM)
        took: dict[int, float] = {}
        codes: dict[int, int | None] = {}
        for broker_id in BROKERS:
            proc = cluster.procs[broker_id].proc
            assert proc is not None
            try:
                codes[broker_id] = proc.wait(timeout=max(0.1, began + 60 - time.monotonic()))
            except Exception:
                codes[broker_id] = None
            took[broker_id] = round(time.monotonic() - began, 1)
            cluster.procs[broker_id].log_file.close()
    finally:
        cluster.stop()
    slow = {b: [e.get("ms") for e in cluster.procs[b].events() if e.get("event") == "rpc.slow"] for b in BROKERS}
    stopped = {b: any(e.get("event") == "broker.stopped" for e in cluster.procs[b].events()) for b in BROKERS}
    print(f"\nstopped after (s): {took}; slow RPCs (ms): {slow}")
    assert codes == {b: 0 for b in BROKERS} and all(stopped.values()), (codes, stopped)
    assert max(took.values()) < STOP_WITHIN_S, f"took {took} s to stop; slow RPCs (ms): {slow}"
