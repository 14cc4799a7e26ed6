"""Moving a partition between real ``rill-broker`` processes while acks=all producers write it (issue 14, part 2).

Four brokers on a real ZooKeeper; topic ``moves`` (one partition, factor 3) starts on
brokers {1,2,3} with 2 MB in it, and moves to {2,3,4} with ``rill topics reassign
--execute --throttle`` while the workload of tests/process/replicated_cluster.py produces
to it with acks=all and a poll() consumer reads it. Then: ``--verify`` reports it
complete and removes the throttle, the replica on broker 1 is deleted, the three replicas
left are byte-identical, and the replication checker finds every acknowledged message in
the final log at its offset (nothing lost, no phantom read). The throttle shows in the
time the copy took. A second test kills the controller with -9 in the middle of the move.
"""

from __future__ import annotations

import json
from datetime import datetime
import os
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from rill.broker.cluster.replicated_topics import create_topic
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import encode_message
from rill.client.simple import SimpleProducer
from rill.client.zookeeper.replica_layout import TopicReplicas, topic_path
from tests.process.replicated_cluster import Cluster, Workload, eventually
from tests.process.replication_checker import OK, History, check, read_final_log

TOPIC = "moves"
FILL_BYTES = 2_000_000
THROTTLE = 500_000
BROKERS4 = (1, 2, 3, 4)

pytestmark = pytest.mark.slow


class FourBrokers(Cluster):
    """replicated_cluster's Cluster with a fourth broker, messages up to 64 KB (so a throttled fetch is small)."""

    def start_all(self) -> None:
        procs = {i: self.process(i, self.tmp_path / f"data-{i}") for i in BROKERS4}
        self.procs.update(procs)
        with ThreadPoolExecutor(len(procs)) as pool:
            for future in [pool.submit(p.start) for p in procs.values()]:
                future.result()

    def replicas(self) -> TopicReplicas:
        return TopicReplicas.decode(self.zk.get(topic_path(TOPIC))[0])

    def reassign(self, *args: str, via: int = 1) -> subprocess.CompletedProcess[str]:
        grpc = f"127.0.0.1:{self.procs[via].grpc_port}"
        return subprocess.run([sys.executable, "-m", "rill.client.cli.main", "topics", "reassign", "--grpc", grpc,
                               *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str, zk: KazooClient):  # type: ignore[no-untyped-def]
    made = FourBrokers(tmp_path, zk_connect, zk, **{"message.max.bytes": 65536})
    try:
        made.start_all()
        create_topic(zk, TOPIC, 1, 3, None, [1, 2, 3], rng=random.Random(7))
        eventually(lambda: made.healthy(TOPIC, 1), 30, "a leader and a full ISR")
        eventually(lambda: all(made.metadata_leaders(b, TOPIC) == (made.leader(0, TOPIC),) for b in BROKERS4), 30,
                   "every broker's metadata naming the leader")
        yield made
    finally:
        made.stop()


def fill(cluster: FourBrokers, history: History, nbytes: int) -> None:
    """``nbytes`` of 16 KB messages, acks=all, before the workload starts (what the new replica must copy)."""
    with SimpleProducer(*cluster.address(cluster.leader(0, TOPIC)), acks=rq.Acks.ALL, timeout=10) as producer:
        for n in range(nbytes // (4 * 16_000)):
            values = [b"fill:%d:" % (4 * n + i) + bytes(16_000) for i in range(4)]
            offset = producer.send(TOPIC, values, 0).first_offset
            for i, value in enumerate(values):
                history.send(value, "fill", 4 * n + i, 0, OK, offset=offset)
                offset += len(encode_message(value))


def write_plan(tmp_path: Path, replicas: list[int]) -> str:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": TOPIC, "partition": 0, "replicas": replicas}]}))
    return str(plan)


def verify_until_complete(cluster: FourBrokers, plan: str, timeout: float, via: int = 1) -> subprocess.CompletedProcess[str]:
    deadline = time.monotonic() + timeout
    while True:
        result = cluster.reassign("--verify", "--reassignment-json-file", plan, via=via)
        if result.returncode != 3:
            return result
        assert time.monotonic() < deadline, f"the move did not complete in {timeout}s: {result.stdout}"
        time.sleep(0.3)


def final_check(cluster: FourBrokers, history: History) -> None:
    """The replicas on 2, 3 and 4 byte-identical, and every acknowledged send in the leader's final log."""
    eventually(lambda: len({cluster.segment_bytes(b, 0, TOPIC) for b in (2, 3, 4)}) == 1, 60,
               "the three replicas to be byte-identical")
    verdict = check(history, {0: read_final_log(*cluster.address(cluster.leader(0, TOPIC)), TOPIC, 0)})
    print(f"\nchecker: {verdict.summary()}")
    verdict.assert_no_loss()
    assert verdict.problems() == {}, verdict.summary()


def test_move_123_to_234_under_acks_all_load_is_throttled_and_loses_nothing(cluster: FourBrokers,
                                                                             tmp_path: Path) -> None:
    """The move completes with producers acknowledged throughout, 2 MB copied at 500 KB/s takes over 3 s, verify
    reports completion and clears the throttle, and broker 1's replica directory is gone."""
    history = History()
    fill(cluster, history, FILL_BYTES)
    workload = Workload(cluster, history, topic=TOPIC, partitions=1, pad=100).start()
    try:
        workload.run_until(50, 30, "before the move")
        plan = write_plan(tmp_path, [2, 3, 4])
        started = time.monotonic()
        executed = cluster.reassign("--execute", "--reassignment-json-file", plan, "--throttle", str(THROTTLE))
        assert executed.returncode == 0, executed.stderr
        assert "The inter-broker throttle limit was set to 500000 B/s" in executed.stdout
        assert "Successfully started partition reassignment for moves-0" in executed.stdout
        acked_before = workload.acked()
        result = verify_until_complete(cluster, plan, timeout=90)
        took = time.monotonic() - started
        assert result.returncode == 0, result.stdout + result.stderr
        assert "Reassignment of partition moves-0 is completed." in result.stdout
        assert "Clearing the replication throttle (was 500000 B/s)" in result.stdout
        assert workload.acked() > acked_before  # produces were acknowledged during the move
        workload.run_until(50, 30, "after the move")
    finally:
        workload.stop()
    print(f"\nmove of {FILL_BYTES} bytes at {THROTTLE} B/s took {took:.1f} s")
    assert took >= 3.0
    assert cluster.replicas().replicas == ((2, 3, 4),) and not cluster.replicas().adding
    state = cluster.state(0, TOPIC)
    assert state.leader in (2, 3, 4) and set(state.isr) == {2, 3, 4}
    eventually(lambda: not [n for n in os.listdir(cluster.procs[1].data_dir) if n.startswith(f"{TOPIC}-0")], 20,
               "broker 1's replica deleted")
    events = cluster.procs[4].events()
    added = next(e for e in events if e.get("event") == "replica_fetcher.added" and e.get("topic") == TOPIC)
    caught_up = next(e for e in events if e.get("event") == "replica.caught_up" and e.get("topic") == TOPIC)
    copied = caught_up["throttled_bytes"]
    seconds = (datetime.fromisoformat(caught_up["timestamp"]) - datetime.fromisoformat(added["timestamp"])).total_seconds()
    print(f"broker 4 copied {copied} bytes in {seconds:.2f} s: {copied / seconds:.0f} B/s")
    assert copied >= FILL_BYTES and copied / seconds <= THROTTLE * 1.2
    final_check(cluster, history)


def test_the_move_survives_the_controller_killed_midway(cluster: FourBrokers, tmp_path: Path) -> None:
    """With the controller killed -9 while broker 4 is still copying (throttled), the next controller finishes it
    (the killed broker is started again: a target replica must be in the ISR before the move completes, and a
    broker moved away while it was down deletes its replica when it returns)."""
    history = History()
    fill(cluster, history, 1_000_000)
    workload = Workload(cluster, history, topic=TOPIC, partitions=1, pad=100).start()
    try:
        workload.run_until(20, 30, "before the move")
        controller = cluster.controller()
        via = next(b for b in BROKERS4 if b != controller)
        plan = write_plan(tmp_path, [2, 3, 4])
        executed = cluster.reassign("--execute", "--reassignment-json-file", plan, "--throttle", "250000", via=via)
        assert executed.returncode == 0, executed.stderr
        assert cluster.replicas().adding  # still copying
        cluster.kill9(controller)
        eventually(lambda: cluster.controller() != controller, 30, "another controller")
        cluster.restart(controller)  # a target replica must be in sync for the move to complete (Kafka's rule)
        result = verify_until_complete(cluster, plan, timeout=120, via=via)
        assert result.returncode == 0, result.stdout + result.stderr
        workload.run_until(20, 60, "after the move")
    finally:
        workload.stop()
    assert cluster.replicas().replicas == ((2, 3, 4),)
    eventually(lambda: set(cluster.state(0, TOPIC).isr) == {2, 3, 4}, 60, "a full ISR on 2, 3, 4")
    eventually(lambda: not [n for n in os.listdir(cluster.procs[1].data_dir) if n.startswith(f"{TOPIC}-0")], 30,
               "broker 1's replica deleted")
    final_check(cluster, history)
