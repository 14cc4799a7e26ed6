"""``rill perf replication``: what copying every message to three brokers costs, on a cluster of its own.

It starts a ZooKeeper and ``--brokers`` brokers (rill.client.cli.perf.cluster_setup) and
creates two topics: ``replicated`` (one partition per broker, replication factor
``--brokers``, so every broker leads one partition and follows the others) and
``unreplicated`` (a 0.7 topic with one partition on each broker). Then:

1. **Throughput**: ``rill perf producer-api --mode many`` (a process of its own) with
   ``acks=all`` to ``replicated`` and with ``acks=append`` to ``unreplicated``,
   alternating, ``--rounds`` times each; the ratio of each round (the two runs next to each
   other, so a machine's noise cancels out) and their median.
2. **Replication lag** at half the median ``acks=all`` rate, for ``--lag-seconds``: every
   5 ms, each replica's log end read from its files (rill's offsets are byte positions,
   so a log's end is its last segment's base offset plus that file's size); the lag of a
   follower is the leader's end minus its own in bytes, and in milliseconds how long
   ago the leader first had more than the follower has now. p50, p99 and the maximum.
3. **acks=all latency** at ``--latency-rate`` messages/s for ``--latency-seconds``: one
   ``send`` per message on the Producer's defaults, the time from ``send`` to its
   acknowledgement. p50, p99, p99.9.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

from rill.client.cli.common import CliError, positive_float, positive_int
from rill.client.cli.perf.cluster_setup import add_cluster_arguments, finish, new_cluster, payloads, say
from rill.client.cli.perf.report import percentile, report
from rill.client.cli.spawned_cluster import SpawnedCluster
from rill.client.producer import Producer, SendResponse
from rill.client.simple import SimpleConsumer

PHASES = ("throughput", "lag", "latency")
REPLICATED = "replicated"
UNREPLICATED = "unreplicated"
SAMPLE_S = 0.005


def add_parsers(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = kinds.add_parser("replication", help="a cluster of its own: acks=all (factor 3) against acks=append "
                                             "(factor 1), replication lag, acks=all latency")
    add_cluster_arguments(p)
    p.add_argument("--messages", type=positive_int, default=1_000_000, metavar="N",
                   help="messages per throughput run (default: 1000000)")
    p.add_argument("--rounds", type=positive_int, default=3, help="throughput runs per setting (default: 3)")
    p.add_argument("--phases", default="throughput,lag,latency",
                   help="which to run, comma-separated (default: throughput,lag,latency)")
    p.add_argument("--lag-rate", type=positive_int, default=None, metavar="MSG_PER_S",
                   help="send rate of the lag run (default: half the median acks=all throughput)")
    p.add_argument("--lag-seconds", type=positive_float, default=10.0, help="length of the lag run (default: 10)")
    p.add_argument("--latency-rate", type=positive_int, default=10_000, metavar="MSG_PER_S",
                   help="send rate of the latency run (default: 10000)")
    p.add_argument("--latency-seconds", type=positive_float, default=10.0,
                   help="length of the latency run (default: 10)")
    p.set_defaults(run=run_replication)


def run_replication(args: argparse.Namespace) -> int:
    phases = {p.strip() for p in args.phases.split(",") if p.strip()}
    if not phases or phases - set(PHASES):
        raise CliError(f"--phases: choose from {', '.join(PHASES)}")
    if "lag" in phases and "throughput" not in phases and args.lag_rate is None:
        raise CliError("--phases: the lag run needs the throughput runs, or --lag-rate")
    cluster = new_cluster(args)
    rounds: list[dict[str, float]] = []
    lag: dict[str, Any] = {}
    latency: dict[str, Any] = {}
    try:
        say(args, f"starting ZooKeeper and {args.brokers} brokers under {cluster.work}")
        cluster.start()
        cluster.create_topic(REPLICATED, args.brokers, args.brokers)
        for broker in cluster.live():
            with SimpleConsumer("127.0.0.1", broker.port, timeout=30) as client:
                client.create_topic(UNREPLICATED, 1)
        if "throughput" in phases:
            rounds = throughput_rounds(args, cluster)
        if "lag" in phases:
            rate = args.lag_rate or statistics.median(r["acks_all"] for r in rounds) / 2
            say(args, f"replication lag at {rate:,.0f} messages/s")
            lag = replication_lag(args, cluster, rate)
        if "latency" in phases:
            say(args, f"acks=all latency at {args.latency_rate:,} messages/s")
            latency = acks_all_latency(args, cluster)
    finally:
        finish(args, cluster)
    result: dict[str, Any] = {"benchmark": "replication", "brokers": args.brokers, "message_size": args.message_size,
                              "rounds": rounds, "lag": lag, "latency": latency}
    lines = [f"rill perf replication: {args.brokers} brokers, {args.message_size} B messages"]
    if rounds:
        all_rate = statistics.median(r["acks_all"] for r in rounds)
        append_rate = statistics.median(r["acks_append"] for r in rounds)
        ratio = statistics.median(r["acks_all"] / r["acks_append"] for r in rounds)
        result.update(acks_all_median=all_rate, acks_append_median=append_rate, ratio=ratio)
        lines += [f"  throughput, acks=all (factor {args.brokers}) against acks=append (factor 1), "
                  f"{args.messages:,} messages per run:"]
        lines += [f"    round {i + 1}: {r['acks_all']:,.0f} against {r['acks_append']:,.0f} messages/s: "
                  f"{r['acks_all'] / r['acks_append']:.2f}" for i, r in enumerate(rounds)]
        lines += [f"    medians {all_rate:,.0f} against {append_rate:,.0f} messages/s; median ratio {ratio:.2f}"]
    if lag:
        lines += [f"  replication lag at {lag['rate']:,.0f} messages/s ({lag['samples']:,} samples of every "
                  f"follower): bytes p50 {lag['bytes_p50']:,} p99 {lag['bytes_p99']:,} max {lag['bytes_max']:,}; "
                  f"ms p50 {lag['ms_p50']:.1f} p99 {lag['ms_p99']:.1f} max {lag['ms_max']:.1f}"]
    if latency:
        lines += [f"  acks=all latency at {latency['rate']:,} messages/s ({latency['messages']:,} messages, "
                  f"linger.ms={latency['linger_ms']:g}): p50 {latency['p50_ms']:.2f} ms, "
                  f"p99 {latency['p99_ms']:.2f} ms, p99.9 {latency['p999_ms']:.2f} ms, max {latency['max_ms']:.2f} ms"]
    report(args, result, lines)
    return 0


# ---------------------------------------------------------------- throughput


def throughput_rounds(args: argparse.Namespace, cluster: SpawnedCluster) -> list[dict[str, float]]:
    """acks=all to the replicated topic and acks=append to the 0.7 one, alternating."""
    rounds = []
    for i in range(args.rounds):
        row = {}
        for key, topic, acks in (("acks_all", REPLICATED, "all"), ("acks_append", UNREPLICATED, "append")):
            row[key] = _producer_api(args, cluster, topic, acks)
            say(args, f"  round {i + 1}: {topic} acks={acks}: {row[key]:,.0f} messages/s")
        rounds.append(row)
    return rounds


def _producer_api(args: argparse.Namespace, cluster: SpawnedCluster, topic: str, acks: str) -> float:
    command = [sys.executable, "-m", "rill.client.cli.main", "perf", "producer-api", "-b", cluster.any_live().address,
               "-t", topic, "--acks", acks, "--mode", "many", "--messages", str(args.messages),
               "--message-size", str(args.message_size), "--json", "-q"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise CliError(f"rill perf producer-api failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    return float(figures["runs"][0]["messages_per_s"])


# ---------------------------------------------------------------- pacing


def paced(rate: float, seconds: float) -> Iterator[int]:
    """How many messages are due now, to send ``rate`` per second for ``seconds``."""
    started = time.perf_counter()
    sent = 0
    while True:
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return
        due = int(rate * elapsed) - sent
        if due <= 0:
            time.sleep(min(0.0005, max(0.0, (sent + 1) / rate - elapsed)))
            continue
        yield due
        sent += due


def _producer(cluster: SpawnedCluster) -> Producer:
    return Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "client.id": "rill-perf"})


def warm_up(producer: Producer, cluster: SpawnedCluster) -> None:
    """One acks=all message to every partition, acknowledged: connections made, metadata known, and every
    follower fetching (one whose first fetch came before its leader knew it leads backs off for
    ``replica.fetch.backoff.ms``, and acks=all waits for it meanwhile)."""
    for response in [producer.send(REPLICATED, b"warm-up", partition=p) for p in range(len(cluster.brokers))]:
        response.get_offset(timeout=60)


# ---------------------------------------------------------------- lag


class LogEnds:
    """Samples every replica's log end from its files, every ``SAMPLE_S``, in a process of its own (so the
    producer does not slow the sampling down), from :meth:`start` until :meth:`stop`."""

    def __init__(self, cluster: SpawnedCluster, topic: str) -> None:
        leaders = cluster.leaders(topic)
        self.dirs = {p: (os.path.join(cluster.brokers[leader].data_dir, f"{topic}-{p}"),
                         [os.path.join(b.data_dir, f"{topic}-{p}") for b in cluster.live() if b.broker_id != leader])
                     for p, leader in leaders.items()}
        context = multiprocessing.get_context("fork")
        self._stop, self._results = context.Pipe()
        self._process = context.Process(target=_sample, args=(self.dirs, self._results), daemon=True,
                                        name="rill-perf-log-ends")

    def start(self) -> None:
        self._process.start()

    def stop(self) -> tuple[list[int], list[float]]:
        """Stop sampling; the lag of every follower at every sample: (bytes, ms)."""
        self._stop.send(None)
        lag_bytes, lag_ms = self._stop.recv()
        self._process.join(30)
        return lag_bytes, lag_ms


def _sample(dirs: dict[int, tuple[str, list[str]]], conn: Connection) -> None:
    history: dict[int, tuple[list[float], list[int]]] = {p: ([], []) for p in dirs}
    lag_bytes: list[int] = []
    lag_ms: list[float] = []
    while not conn.poll(SAMPLE_S):
        for p, (leader_dir, follower_dirs) in dirs.items():
            followers = [log_end(d) for d in follower_dirs]  # before the leader's: a lag is never made up
            now = time.perf_counter()
            end = log_end(leader_dir)
            times, ends = history[p]
            times.append(now)
            ends.append(end)
            for follower_end in followers:
                lag_bytes.append(max(0, end - follower_end))
                lag_ms.append(behind_ms(times, ends, follower_end, now))
    conn.send((lag_bytes, lag_ms))


def behind_ms(times: list[float], ends: list[int], follower_end: int, now: float) -> float:
    """How long ago the leader's end passed ``follower_end`` (0: it has no more now), interpolated between
    the two samples around it: the follower has every byte the leader had then."""
    if ends[-1] <= follower_end:
        return 0.0
    lo, hi = 0, len(ends) - 1  # the first sample whose end is past the follower's (ends never shrink here)
    while lo < hi:
        mid = (lo + hi) // 2
        if ends[mid] > follower_end:
            hi = mid
        else:
            lo = mid + 1
    if lo == 0:
        return (now - times[0]) * 1000
    share = (follower_end - ends[lo - 1]) / (ends[lo] - ends[lo - 1])
    return (now - (times[lo - 1] + share * (times[lo] - times[lo - 1]))) * 1000


def log_end(directory: str) -> int:
    """A partition's log end from its files: its last segment's base offset plus that file's size."""
    try:
        last = max(name for name in os.listdir(directory) if name.endswith(".log"))
        return int(last[:-4]) + os.stat(os.path.join(directory, last)).st_size
    except (OSError, ValueError):
        return 0


def replication_lag(args: argparse.Namespace, cluster: SpawnedCluster, rate: float) -> dict[str, Any]:
    pool = payloads(args.message_size)
    sampler = LogEnds(cluster, REPLICATED)
    sent, chunk = 0, []
    sampler.start()  # before the producer's threads: the sampler is a fork of this process
    with _producer(cluster) as producer:
        warm_up(producer, cluster)
        for due in paced(rate, args.lag_seconds):
            for _ in range(due):
                chunk.append(pool[sent % len(pool)])
                sent += 1
            producer.send_many(REPLICATED, chunk)
            chunk = []
        producer.flush()
    lag_bytes, lag_ms = sampler.stop()
    by_bytes, by_ms = sorted(lag_bytes), sorted(lag_ms)
    return {"rate": rate, "messages": sent, "samples": len(by_bytes),
            "bytes_p50": percentile(by_bytes, 0.5), "bytes_p99": percentile(by_bytes, 0.99), "bytes_max": by_bytes[-1],
            "ms_p50": percentile(by_ms, 0.5), "ms_p99": percentile(by_ms, 0.99), "ms_max": by_ms[-1]}


# ---------------------------------------------------------------- latency


def acks_all_latency(args: argparse.Namespace, cluster: SpawnedCluster) -> dict[str, Any]:
    """One waiter per partition takes the responses in the order they were sent: a partition's batches
    are acknowledged in order, so each is timed when it is done, not behind another partition's."""
    pool = payloads(args.message_size)
    latencies: list[float] = []
    errors: list[BaseException] = []

    def wait_all(pending: queue.SimpleQueue[tuple[float, SendResponse] | None]) -> None:
        while (item := pending.get()) is not None:
            sent_at, response = item
            error = response.get_error(timeout=60)
            latencies.append(time.perf_counter() - sent_at)
            if error is not None:
                errors.append(error)

    queues: dict[int | None, queue.SimpleQueue[tuple[float, SendResponse] | None]] = {}
    waiters = []
    with _producer(cluster) as producer:
        warm_up(producer, cluster)
        linger_ms = producer.config["linger.ms"]
        n = 0
        for due in paced(args.latency_rate, args.latency_seconds):
            for _ in range(due):
                sent_at = time.perf_counter()
                response = producer.send(REPLICATED, pool[n % len(pool)])
                pending = queues.get(response.partition)
                if pending is None:
                    pending = queues[response.partition] = queue.SimpleQueue()
                    waiters.append(threading.Thread(target=wait_all, args=(pending,), daemon=True,
                                                    name=f"rill-perf-acks-{response.partition}"))
                    waiters[-1].start()
                pending.put((sent_at, response))
                n += 1
        for pending in queues.values():
            pending.put(None)
        for waiter in waiters:
            waiter.join()
    if errors:
        raise CliError(f"{len(errors)} of {n} acks=all sends failed: {errors[0]!r}")
    ms = sorted(x * 1000 for x in latencies)
    return {"rate": args.latency_rate, "messages": n, "linger_ms": linger_ms, "p50_ms": percentile(ms, 0.5),
            "p99_ms": percentile(ms, 0.99), "p999_ms": percentile(ms, 0.999), "max_ms": ms[-1]}


__all__ = ["add_parsers", "log_end", "run_replication"]
