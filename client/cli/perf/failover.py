"""``rill perf failover``: how long a partition cannot take acks=all produces when its leader goes away.

On a cluster of its own (rill.client.cli.perf.cluster_setup), a topic of ``--partitions``
partitions with replication factor ``--brokers``. For each fault of ``--faults``
(``kill9``: ``kill -9`` of the leader; ``sigterm``: a graceful stop, which moves
leadership away first, Kafka's controlled shutdown), ``--rounds`` times:

1. a probe sends one ``acks=all`` message to partition 0 every few milliseconds, each
   to the leader that METADATA names (asked again after any failure, of a broker that
   is not the victim), and notes when every send started and succeeded;
2. the leader of partition 0 (never the controller, whose own failover is another
   figure: ``--victim controller`` picks it on purpose) is killed or stopped;
3. the unavailability is the longest time without an acknowledgement, from the last
   one before the fault to the first of a send started after the victim's process
   ended (a graceful stop serves until its leaderships have moved);
4. the victim is started again and the cluster waits until every replica is back in
   sync before the next round.

After ``kill -9`` the unavailability is dominated by ``zookeeper.session.timeout.ms``:
ZooKeeper tells the controller only when the dead broker's session expires. Run it once
with the default and once with ``--set zookeeper.session.timeout.ms=2000``.
"""

from __future__ import annotations

import argparse
import bisect
import statistics
import threading
import time
from typing import Any

from rill.client.cli.common import CliError, positive_int
from rill.client.cli.perf.cluster_setup import add_cluster_arguments, finish, new_cluster, payloads, say
from rill.client.cli.perf.report import report
from rill.client.cli.spawned_broker import SpawnedBroker
from rill.client.cli.spawned_cluster import SpawnedCluster
from rill.client.errors import BrokerError, ConnectionClosed
from rill.client.protocol import requests as rq
from rill.client.simple import SimpleConsumer, SimpleProducer

TOPIC = "failover"
PROBE_INTERVAL_S = 0.002
PROBE_TIMEOUT_S = 2.0
FAULTS = ("kill9", "sigterm")


def add_parsers(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = kinds.add_parser("failover", help="a cluster of its own: how long acks=all produces to a partition fail "
                                          "after kill -9 or SIGTERM of its leader")
    add_cluster_arguments(p)
    p.add_argument("--partitions", type=positive_int, default=3, help="partitions of the topic (default: 3)")
    p.add_argument("--faults", default="kill9,sigterm", help="comma-separated: kill9, sigterm (default: both)")
    p.add_argument("--rounds", type=positive_int, default=3, help="faults of each kind (default: 3)")
    p.add_argument("--victim", choices=["leader", "controller"], default="leader",
                   help="leader: partition 0's leader, never the controller (default); controller: the controller, "
                        "made partition 0's leader first")
    p.set_defaults(run=run_failover)


def run_failover(args: argparse.Namespace) -> int:
    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    unknown = [f for f in faults if f not in FAULTS]
    if unknown or not faults:
        raise CliError(f"--faults: {', '.join(unknown) or 'none given'}: choose from {', '.join(FAULTS)}")
    cluster = new_cluster(args)
    rows: list[dict[str, Any]] = []
    try:
        say(args, f"starting ZooKeeper and {args.brokers} brokers under {cluster.work}")
        cluster.start()
        cluster.create_topic(TOPIC, args.partitions, args.brokers)
        for fault in faults:
            for i in range(args.rounds):
                row = one_fault(args, cluster, fault)
                role = "the controller, leader of partition 0" if row["controller"] else "leader of partition 0"
                say(args, f"  {fault} round {i + 1}: broker {row['victim']} ({role}): "
                          f"no acknowledgement for {row['unavailable_ms']:,.0f} ms")
                rows.append(row)
    finally:
        finish(args, cluster)
    summary = {f: statistics.median(r["unavailable_ms"] for r in rows if r["fault"] == f) for f in faults}
    settings = " ".join(f"--set {s}" for s in args.settings) or "the brokers' defaults"
    result = {"benchmark": "failover", "brokers": args.brokers, "partitions": args.partitions, "rounds": rows,
              "median_unavailable_ms": summary, "settings": list(args.settings)}
    lines = [f"rill perf failover: {args.brokers} brokers, topic of {args.partitions} partitions, factor "
             f"{args.brokers}, {settings}"]
    for fault in faults:
        each = ", ".join(f"{r['unavailable_ms']:,.0f}" for r in rows if r["fault"] == fault)
        lines.append(f"  {fault}: no acks=all produce to partition 0 acknowledged for {summary[fault]:,.0f} ms "
                     f"(median; each round: {each} ms)")
    report(args, result, lines)
    return 0


def one_fault(args: argparse.Namespace, cluster: SpawnedCluster, fault: str) -> dict[str, Any]:
    victim = _victim(args, cluster)
    controller = cluster.controller_id() == victim.broker_id
    probe = Probe(cluster, payloads(args.message_size, 16), avoid=victim.broker_id)
    probe.start()
    try:
        probe.wait_for_success()
        started = time.monotonic()
        if fault == "kill9":
            victim.kill9()
        else:
            victim.stop(timeout=120)
        exited = time.monotonic()
        probe.first_success_after(exited, timeout=120)
    finally:
        probe.stop()
    unavailable_ms = probe.longest_gap(started, exited) * 1000
    victim.start()
    cluster.wait_in_sync(TOPIC)
    return {"fault": fault, "victim": victim.broker_id, "controller": controller, "unavailable_ms": unavailable_ms,
            "probe_failures": probe.failures}


def _victim(args: argparse.Namespace, cluster: SpawnedCluster) -> SpawnedBroker:
    """Partition 0's leader; never the controller unless asked (then it is made partition 0's leader)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        leader = cluster.leaders(TOPIC).get(0, rq.NO_LEADER)
        controller = cluster.controller_id()
        if leader != rq.NO_LEADER and (leader == controller) == (args.victim == "controller"):
            return cluster.brokers[leader]
        # Move partition 0's leadership: a graceful stop of its leader, then a start (it comes back a follower).
        if leader != rq.NO_LEADER:
            mover = cluster.brokers[leader]
            mover.stop(timeout=120)
            mover.start()
            cluster.wait_in_sync(TOPIC)
    raise CliError("could not make partition 0's leader a broker of the kind asked (--victim)")


class Probe(threading.Thread):
    """Sends one acks=all message to partition 0 of TOPIC at a time, to its current leader."""

    def __init__(self, cluster: SpawnedCluster, pool: list[bytes], *, avoid: int | None) -> None:
        super().__init__(name="rill-perf-failover-probe", daemon=True)
        self.metadata_from = [b for b in cluster.live() if b.broker_id != avoid]
        self.pool = pool
        self.successes: list[tuple[float, float]] = []  # (sent, acknowledged), monotonic
        self.failures = 0
        self.changed = threading.Condition()
        self.stopped = threading.Event()

    def run(self) -> None:
        producer: SimpleProducer | None = None
        n = 0
        while not self.stopped.is_set():
            if producer is None:
                producer = self._connect_to_leader()
                if producer is None:
                    self.stopped.wait(PROBE_INTERVAL_S)
                    continue
            sent = time.monotonic()
            try:
                producer.send(TOPIC, [self.pool[n % len(self.pool)]], partition=0)
            except (BrokerError, ConnectionClosed, OSError):
                self.failures += 1
                producer.close()
                producer = None
                self.stopped.wait(PROBE_INTERVAL_S)
                continue
            n += 1
            with self.changed:
                self.successes.append((sent, time.monotonic()))
                self.changed.notify_all()
            self.stopped.wait(PROBE_INTERVAL_S)
        if producer is not None:
            producer.close()

    def _connect_to_leader(self) -> SimpleProducer | None:
        for broker in self.metadata_from:
            try:
                with SimpleConsumer("127.0.0.1", broker.port, timeout=PROBE_TIMEOUT_S) as client:
                    meta = client.metadata([TOPIC])
            except (BrokerError, ConnectionClosed, OSError):
                continue
            leader = meta.topics[0].leaders[0] if meta.topics and meta.topics[0].leaders else rq.NO_LEADER
            address = {b.broker_id: (b.host, b.port) for b in meta.brokers}.get(leader)
            if address is None:
                return None
            try:
                producer = SimpleProducer(*address, acks=rq.Acks.ALL, timeout=PROBE_TIMEOUT_S)
                producer.connect()
                return producer
            except (ConnectionClosed, OSError):
                return None
        return None

    def wait_for_success(self, timeout: float = 60.0) -> None:
        self.first_success_after(time.monotonic(), timeout)

    def first_success_after(self, moment: float, timeout: float) -> float:
        """When the first send started after ``moment`` was acknowledged (monotonic)."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                at = bisect.bisect_left(self.successes, (moment, 0.0))  # sends start in order
                if at < len(self.successes):
                    return self.successes[at][1]
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise CliError(f"no acks=all produce to {TOPIC}-0 succeeded within {timeout:g} s")
                self.changed.wait(remaining)

    def longest_gap(self, fault: float, exited: float) -> float:
        """The longest time without an acknowledgement from the last one of a send started before ``fault``
        to the first of a send started after the victim ``exited`` (seconds)."""
        with self.changed:
            acks = [acknowledged for _, acknowledged in self.successes]
            first = max(0, bisect.bisect_left(self.successes, (fault, 0.0)) - 1)
            last = bisect.bisect_left(self.successes, (exited, 0.0))
        window = acks[first:last + 1]
        gaps = [b - a for a, b in zip(window, window[1:])]
        return max(gaps, default=0.0)

    def stop(self) -> None:
        self.stopped.set()
        self.join(30)


__all__ = ["add_parsers", "run_failover"]
