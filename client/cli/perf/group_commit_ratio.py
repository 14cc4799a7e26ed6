"""``rill perf group-commits``: commit throughput with group state on ``__rill_groups`` against a broker's local log.

In one run it starts a cluster of its own (rill.client.cli.perf.cluster_setup: a ZooKeeper
and ``--brokers`` brokers, ``__rill_groups`` of factor ``offsets.topic.replication.factor``,
3 by default) and one standalone broker (no ZooKeeper: it keeps its groups in a local log
fsynced at every commit), its data directory in the same work directory under ``--dir``.
Both get a topic of ``--partitions`` partitions (of factor ``--brokers`` in the cluster)
with one message in each, so 0 and that message's end are both message boundaries.

Then ``--rounds`` times, the replicated setting (A) and the local one (B), one after the
other: ``--clients`` threads, each a registered member of a group of its own (ephemeral,
named afresh every run), commit every partition's offset in each CommitOffsets call,
alternating 0 and the message's end, for ``--seconds``, as ``rill perf commits`` does
(rill.client.cli.perf.commit_client), each to its group's coordinator. In the cluster
the groups spread over the brokers that lead their ``__rill_groups`` partitions, and a
commit is answered once every in-sync replica has it; on the standalone broker once it is
fsynced. Each round gives calls/s and offsets/s of both and their ratio
(replicated/local); the two runs of a round are next to each other, so the machine's
drift cancels out of the ratio. The report gives the median ratio.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from rill.client.cli.common import CliError, positive_float, positive_int
from rill.client.cli.perf.cluster_setup import add_cluster_arguments, broker_settings, finish, new_cluster, say
from rill.client.cli.perf.commit_client import CommitClient
from rill.client.cli.perf.group_members import (SETUP_HEARTBEAT_S, Member, MemberLoop, Timed, check_loops,
                                                latency_figures, leave_all, stop_loops, wait_stable)
from rill.client.cli.perf.report import report
from rill.client.cli.spawned_broker import SpawnedBroker
from rill.client.cli.spawned_cluster import SpawnedCluster
from rill.client.grpc_client import AdminClient, error_name
from rill.client.protocol import requests as rq
from rill.client.simple import SimpleProducer
from rill.client.topic_names import GROUPS_TOPIC
from rill.v1 import coordinator_pb2 as pb

TOPIC = "group-commits"
SETTINGS = ("replicated", "local")
CREATE_WAIT_S = 60.0


def add_parsers(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = kinds.add_parser("group-commits", help="a cluster of its own and a standalone broker: commit throughput with "
                                               "groups on __rill_groups against a broker's local log, alternating")
    add_cluster_arguments(p)
    p.add_argument("--clients", type=positive_int, default=8, metavar="N",
                   help="committing members, each in a group of its own on a channel of its own (default: 8)")
    p.add_argument("--partitions", type=positive_int, default=100, metavar="N",
                   help="partitions of the topic: offsets in every commit (default: 100)")
    p.add_argument("--seconds", type=positive_float, default=10.0, help="length of each run (default: 10)")
    p.add_argument("--rounds", type=positive_int, default=3, help="pairs of runs, replicated then local (default: 3)")
    p.add_argument("--session-timeout-ms", type=positive_int, default=10_000, metavar="MS",
                   help="the members' session timeout (default: 10000)")
    p.add_argument("--heartbeat-interval-ms", type=positive_int, default=1000, metavar="MS",
                   help="each member heartbeats this often between commits (default: 1000)")
    p.set_defaults(run=run_group_commits)


class Target:
    """One of the two settings: where to ask for groups, and the topic's message ends."""

    def __init__(self, name: str, admin_address: str, ends: dict[int, int]) -> None:
        self.name = name
        self.admin_address = admin_address
        self.ends = ends


def run_group_commits(args: argparse.Namespace) -> int:
    cluster = new_cluster(args)
    local = SpawnedBroker(os.path.join(cluster.work, "standalone"), broker_settings(args))
    rounds: list[dict[str, Any]] = []
    try:
        say(args, f"starting ZooKeeper, {args.brokers} brokers and a standalone broker under {cluster.work}")
        cluster.start()
        local.start()
        cluster.wait_in_sync(GROUPS_TOPIC)
        targets = {"replicated": Target("replicated", f"127.0.0.1:{cluster.any_live().grpc_port}",
                                        fill_cluster_topic(args, cluster)),
                   "local": Target("local", f"127.0.0.1:{local.grpc_port}", fill_local_topic(args, local))}
        for i in range(args.rounds):
            row: dict[str, Any] = {}
            for name in SETTINGS:
                row[name] = commit_run(args, targets[name])
                say(args, f"  round {i + 1}: {name}: {row[name]['calls_per_s']:,.0f} calls/s "
                          f"({row[name]['offsets_per_s']:,.0f} offsets/s), p50 {row[name]['p50_ms']:.2f} ms")
            row["ratio"] = row["replicated"]["calls_per_s"] / row["local"]["calls_per_s"]
            rounds.append(row)
    finally:
        if local.proc is not None and local.proc.poll() is None:
            try:
                local.stop(timeout=60)
            except Exception:  # never leave the process behind
                local.kill9()
        finish(args, cluster)
    result = summarize(args, rounds)
    report(args, result, text_lines(args, result))
    return 0


def fill_cluster_topic(args: argparse.Namespace, cluster: SpawnedCluster) -> dict[int, int]:
    """The topic (factor ``--brokers``) with one message in each partition, sent to its leader; partition -> end."""
    cluster.create_topic(TOPIC, args.partitions, args.brokers)
    ends: dict[int, int] = {}
    deadline = time.monotonic() + CREATE_WAIT_S
    while True:  # a leader DescribeTopics names may not serve its partition yet (UnknownTopic): again
        by_leader: dict[int, list[int]] = collections.defaultdict(list)
        for partition, leader in cluster.leaders(TOPIC).items():
            if partition not in ends and leader in cluster.brokers:
                by_leader[leader].append(partition)
        failed: list[str] = []
        for leader, partitions in by_leader.items():
            with SimpleProducer("127.0.0.1", cluster.brokers[leader].port, acks=rq.Acks.ALL, timeout=30) as producer:
                acks = producer.send_many({(TOPIC, p): [b"rill perf group-commits"] for p in partitions},
                                          raise_errors=False)
            ends.update({p: ack.next_offset for (_, p), ack in acks.items() if ack.error == 0})
            failed += [f"{TOPIC}-{p}: error {ack.error}" for (_, p), ack in acks.items() if ack.error]
        if len(ends) == args.partitions:
            return ends
        if time.monotonic() > deadline:
            raise CliError(f"could not write the first message of every partition: {failed[:5]}")
        time.sleep(0.1)


def fill_local_topic(args: argparse.Namespace, broker: SpawnedBroker) -> dict[int, int]:
    with AdminClient(f"127.0.0.1:{broker.grpc_port}", 30.0) as admin:
        created = admin.create_topic(TOPIC, args.partitions)
        if created.error_code:
            raise CliError(f"creating {TOPIC} on the standalone broker: {error_name(created.error_code)}")
    with SimpleProducer("127.0.0.1", broker.port, timeout=30) as producer:
        acks = producer.send_many({(TOPIC, p): [b"rill perf group-commits"] for p in range(args.partitions)})
    return {p: ack.next_offset for (_, p), ack in acks.items()}


def create_group(admin: AdminClient, group: str, args: argparse.Namespace, fallback: str) -> str:
    """Create an ephemeral group on TOPIC; the gRPC address of its coordinator (retried while none serves it)."""
    deadline = time.monotonic() + CREATE_WAIT_S
    while True:
        created = admin.create_group(group, [TOPIC], session_timeout_ms=args.session_timeout_ms, ephemeral=True)
        if created.error_code == pb.NONE:
            c = created.coordinator
            return f"{c.host}:{c.grpc_port}" if c.grpc_port > 0 else fallback
        if created.error_code != pb.NOT_COORDINATOR or time.monotonic() > deadline:
            raise CliError(f"cannot create group {group!r}: {error_name(created.error_code)}")
        time.sleep(0.1)


def commit_run(args: argparse.Namespace, target: Target) -> dict[str, Any]:
    """``--clients`` members, a group each, committing every partition for ``--seconds``; the figures."""
    rid = uuid.uuid4().hex[:8]
    groups = [f"perf-gc-{rid}-{i}" for i in range(args.clients)]
    with AdminClient(target.admin_address, 30.0) as admin:
        addresses = {g: create_group(admin, g, args, target.admin_address) for g in groups}
    members = [Member(addresses[g], g, 30.0, args.session_timeout_ms) for g in groups]
    loops: list[MemberLoop] = []
    clients: list[CommitClient] = []
    try:
        loops = [MemberLoop(m, SETUP_HEARTBEAT_S).start() for m in members]
        for loop in loops:
            with AdminClient(loop.member.address, 30.0) as at_coordinator:
                wait_stable(at_coordinator, loop.member.group, [loop], 60.0)
        stop_loops(loops)
        check_loops(loops)
        clients = [CommitClient(m, target.ends, args.heartbeat_interval_ms / 1000) for m in members]
        timed = Timed(args.seconds, True, "commit calls", lambda: sum(c.calls for c in clients))
        elapsed = timed.run([_bound(c.run, lambda: timed.deadline) for c in clients])
    finally:
        stop_loops(loops)
        leave_all(members)
    calls = sum(c.calls for c in clients)
    offsets = sum(c.offsets for c in clients)
    return {"calls": calls, "offsets": offsets, "seconds": elapsed, "calls_per_s": calls / elapsed,
            "offsets_per_s": offsets / elapsed, "errors": sum(c.errors for c in clients),
            "rejoins": sum(c.rejoins for c in clients),
            "coordinators": dict(collections.Counter(addresses.values())),
            **latency_figures([s for c in clients for s in c.samples])}


def _bound(fn: Callable[[Callable[[], float]], None], arg: Callable[[], float]) -> Callable[[], None]:
    return lambda: fn(arg)


def summarize(args: argparse.Namespace, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    medians = {name: {key: statistics.median(r[name][key] for r in rounds)
                      for key in ("calls_per_s", "offsets_per_s", "p50_ms", "p99_ms")} for name in SETTINGS}
    return {"benchmark": "group-commits", "brokers": args.brokers, "clients": args.clients,
            "partitions": args.partitions, "seconds": args.seconds, "settings": list(args.settings),
            "rounds": rounds, "medians": medians, "ratio": statistics.median(r["ratio"] for r in rounds),
            "errors": sum(r[name]["errors"] for r in rounds for name in SETTINGS)}


def text_lines(args: argparse.Namespace, result: dict[str, Any]) -> list[str]:
    settings = " ".join(f"--set {s}" for s in args.settings) or "the brokers' defaults"
    lines = [f"rill perf group-commits: {args.clients} members (a group each) committing {args.partitions} offsets "
             f"per call for {args.seconds:g} s; replicated: {args.brokers} brokers, __rill_groups of their factor; "
             f"local: one standalone broker ({settings})"]
    for i, r in enumerate(result["rounds"]):
        a, b = r["replicated"], r["local"]
        lines.append(f"  round {i + 1}: replicated {a['calls_per_s']:,.0f} calls/s ({a['offsets_per_s']:,.0f} offsets/s, "
                     f"p50 {a['p50_ms']:.2f} ms), local {b['calls_per_s']:,.0f} calls/s "
                     f"({b['offsets_per_s']:,.0f} offsets/s, p50 {b['p50_ms']:.2f} ms): ratio {r['ratio']:.2f}")
    m = result["medians"]
    lines.append(f"  medians: replicated {m['replicated']['calls_per_s']:,.0f} calls/s, local "
                 f"{m['local']['calls_per_s']:,.0f} calls/s; median ratio replicated/local {result['ratio']:.2f}; "
                 f"{result['errors']} commits refused")
    return lines


__all__ = ["add_parsers", "run_group_commits"]
