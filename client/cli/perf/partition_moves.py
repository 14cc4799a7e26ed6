"""``rill perf reassignment``: how long moving a full partition takes under a throttle, and what producers see.

On a cluster of its own (rill.client.cli.perf.cluster_setup; four brokers by default), a
topic of one partition and factor 3:

1. the partition is filled with ``--bytes`` (1 GB by default) of ``--fill-message-size``
   messages, acks=all, and the cluster waits until every replica has them;
2. a probe sends one acks=all message of ``--message-size`` bytes every
   ``1/--rate`` seconds to the partition's leader (following it when it moves) and
   records each latency; for ``--before-seconds`` nothing else happens;
3. the partition moves off its leader onto the broker that holds no replica (Admin
   AlterReplicationThrottle with ``--throttle``, then AlterPartitionReassignments, as
   ``rill topics reassign --execute --throttle`` does), and the run waits until
   ListPartitionReassignments lists nothing; the throttle is then removed.

It reports the seconds the move took (and the rate that makes), the probe's p50 and
p99 latency before and during the move, and its failed sends (a leader change answers
the one in flight with an error; the probe sends again to the new leader).
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

from rill.client.cli.common import CliError, positive_float, positive_int
from rill.client.cli.perf.cluster_setup import add_cluster_arguments, finish, new_cluster, payloads, say
from rill.client.cli.perf.report import MB, percentile, report
from rill.client.cli.spawned_cluster import SpawnedCluster
from rill.client.errors import BrokerError, ConnectionClosed, RillError
from rill.client.grpc_client import error_name
from rill.client.protocol import requests as rq
from rill.client.simple import SimpleProducer

TOPIC = "reassign"
FILL_BATCH = 16


def add_parsers(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = kinds.add_parser("reassignment", help="a cluster of its own: the time to move a full partition under a "
                                              "throttle, and acks=all latency before and during")
    add_cluster_arguments(p)
    p.set_defaults(brokers=4)
    p.add_argument("--bytes", type=positive_int, default=1_000_000_000, help="bytes to fill the partition with "
                                                                              "(default: 1 GB)")
    p.add_argument("--fill-message-size", type=positive_int, default=65_536, metavar="BYTES",
                   help="size of the messages that fill it (default: 65536)")
    p.add_argument("--throttle", type=positive_int, default=50_000_000, metavar="BYTES_PER_S",
                   help="the replication throttle during the move (default: 50 MB/s)")
    p.add_argument("--rate", type=positive_float, default=200.0, help="probe sends per second (default: 200)")
    p.add_argument("--before-seconds", type=positive_float, default=5.0,
                   help="probe time before the move (default: 5)")
    p.add_argument("--timeout", type=positive_float, default=3600.0, help="longest the move may take (default: 3600)")
    p.set_defaults(run=run_reassignment)


def run_reassignment(args: argparse.Namespace) -> int:
    if args.brokers < 4:
        raise CliError("--brokers must be at least 4 (three replicas and one to move to)")
    cluster = new_cluster(args)
    try:
        say(args, f"starting ZooKeeper and {args.brokers} brokers under {cluster.work}")
        cluster.start()
        cluster.create_topic(TOPIC, 1, 3)
        row = cluster.describe(TOPIC)[0]
        replicas, leader = tuple(row.replicas), row.leader
        spare = min(b for b in cluster.brokers if b not in replicas)
        target = tuple(b for b in replicas if b != leader) + (spare,)
        fill_started = time.monotonic()
        fill(args, cluster)
        say(args, f"  filled with {args.bytes / MB:,.0f} MB in {time.monotonic() - fill_started:.1f} s")
        probe = Probe(cluster, payloads(args.message_size, 64), 1 / args.rate)
        probe.start()
        try:
            time.sleep(args.before_seconds)
            moved = move(args, cluster, target, probe)
        finally:
            probe.stop()
    finally:
        finish(args, cluster)
    before, during = probe.latencies(0, moved["started"]), probe.latencies(moved["started"], moved["ended"])
    seconds = moved["ended"] - moved["started"]
    result = {"benchmark": "reassignment", "brokers": args.brokers, "bytes": args.bytes, "throttle": args.throttle,
              "replicas": list(replicas), "target": list(target), "move_seconds": round(seconds, 2),
              "move_mb_per_s": round(args.bytes / seconds / MB, 2), "before": before, "during": during,
              "probe_failures": probe.failures, "settings": list(args.settings)}
    lines = [f"rill perf reassignment: {args.brokers} brokers, one partition of {args.bytes / MB:,.1f} MB moved "
             f"from {list(replicas)} to {list(target)} at --throttle {args.throttle / MB:g} MB/s",
             f"  move: {seconds:.1f} s ({result['move_mb_per_s']:,.2f} MB/s of partition data)",
             f"  acks=all probe ({args.message_size} B, {args.rate:g}/s) before: p50 {before['p50_ms']} ms, "
             f"p99 {before['p99_ms']} ms ({before['count']} sends)",
             f"  during the move: p50 {during['p50_ms']} ms, p99 {during['p99_ms']} ms ({during['count']} sends, "
             f"{probe.failures} failed and sent again)"]
    report(args, result, lines)
    return 0


def fill(args: argparse.Namespace, cluster: SpawnedCluster) -> None:
    """``--bytes`` of messages, acks=all, to the leader; then every replica in sync.

    A retriable refusal (the leader named by ZooKeeper has not applied its LeaderAndIsr yet: UnknownTopic,
    NotLeaderForPartition) is sent again to the leader named then, as a producer does, for up to 30 s
    without a success.
    """
    pool = payloads(args.fill_message_size, 16)
    sent, last_said = 0, time.monotonic()
    last_sent = time.monotonic()
    while sent < args.bytes:
        leader = cluster.brokers[cluster.leaders(TOPIC)[0]]
        try:
            with SimpleProducer("127.0.0.1", leader.port, acks=rq.Acks.ALL, timeout=60) as producer:
                while sent < args.bytes:
                    batch = [pool[(sent // args.fill_message_size + i) % len(pool)] for i in range(FILL_BATCH)]
                    producer.send(TOPIC, batch, 0)
                    sent += sum(len(m) for m in batch)
                    last_sent = time.monotonic()
                    if last_sent - last_said > 5:
                        say(args, f"  filling: {sent / MB:,.0f} of {args.bytes / MB:,.0f} MB")
                        last_said = time.monotonic()
        except BrokerError as exc:
            if not exc.retriable or time.monotonic() - last_sent > 30:
                raise
            time.sleep(0.1)
    cluster.wait_in_sync(TOPIC, timeout=600)


def move(args: argparse.Namespace, cluster: SpawnedCluster, target: tuple[int, ...], probe: Probe) -> dict[str, float]:
    """Throttle, start the move, wait until it is done, remove the throttle: the monotonic start and end."""
    with cluster.admin() as admin:
        answer = admin.alter_replication_throttle(args.throttle)
        if answer.error_code:
            raise CliError(f"throttle: {error_name(answer.error_code)}: {answer.error_message}")
        started = time.monotonic()
        response = admin.alter_partition_reassignments([(TOPIC, 0, target)])
        failed = [r for r in response.results if r.error_code] if not response.error_code else [response]
        if failed:
            raise CliError(f"the move was not started: {error_name(failed[0].error_code)}: {failed[0].error_message}")
        say(args, f"  moving to {list(target)} at {args.throttle / MB:g} MB/s")
        last_said = started
        while admin.list_partition_reassignments([TOPIC]).reassignments:
            if time.monotonic() - started > args.timeout:
                raise CliError(f"the move did not complete in {args.timeout:g} s")
            if time.monotonic() - last_said > 5:
                say(args, f"  still moving after {time.monotonic() - started:.0f} s; probe p50 "
                          f"{probe.latencies(started, time.monotonic())['p50_ms']} ms")
                last_said = time.monotonic()
            time.sleep(0.05)
        ended = time.monotonic()
        admin.alter_replication_throttle(0)
    return {"started": started, "ended": ended}


class Probe:
    """One acks=all send at a time, every ``interval_s``, to partition 0's leader; (time, latency) per success."""

    def __init__(self, cluster: SpawnedCluster, pool: list[bytes], interval_s: float) -> None:
        self.cluster = cluster
        self.pool = pool
        self.interval_s = interval_s
        self.samples: list[tuple[float, float]] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reassignment-probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        producer: SimpleProducer | None = None
        n = 0
        try:
            while not self._stop.is_set():
                if producer is None:
                    leader = self.cluster.brokers.get(self.cluster.leaders(TOPIC).get(0, -1))
                    if leader is None:
                        self._stop.wait(0.05)
                        continue
                    producer = SimpleProducer("127.0.0.1", leader.port, acks=rq.Acks.ALL, timeout=10)
                started = time.monotonic()
                try:
                    producer.send(TOPIC, [self.pool[n % len(self.pool)]], 0)
                    self.samples.append((started, (time.monotonic() - started) * 1000))
                except (BrokerError, ConnectionClosed, RillError, OSError):
                    self.failures += 1
                    producer.close()
                    producer = None
                n += 1
                self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))
        finally:
            if producer is not None:
                producer.close()

    def latencies(self, start: float, end: float) -> dict[str, Any]:
        """p50 and p99 (ms) of the sends started in [start, end)."""
        values = sorted(ms for at, ms in list(self.samples) if start <= at < end)
        if not values:
            return {"count": 0, "p50_ms": None, "p99_ms": None}
        return {"count": len(values), "p50_ms": round(percentile(values, 0.5), 2),
                "p99_ms": round(percentile(values, 0.99), 2)}
