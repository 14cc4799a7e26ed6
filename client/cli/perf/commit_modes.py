"""``rill perf commit-modes``: offsets committed per second, native coordinator against ZooKeeper (0.7).

It runs **both** modes in one invocation, on the same brokers and the same ZooKeeper,
and prints both figures and their ratio (native / ZooKeeper), so the ratio comes from
one run on one machine state (as ``rill perf rebalance-modes`` does, see
:mod:`rill.client.cli.perf.rebalance_modes`; both use
:mod:`rill.client.cli.perf.mode_comparison`).

Native: ``--clients`` registered members (a group each, as ``rill perf commits`` does)
send CommitOffsets for ``--partitions`` partitions per call to the coordinator, which
appends them to its offsets log (one fsync per call, shared between concurrent calls).
ZooKeeper: ``--clients`` ZooKeeper sessions (a group each) write the same partitions'
offsets the 0.7 way, one ``setData`` per partition under
``/consumers/[group]/offsets/[topic]/[broker-partition]``, pipelined
(:meth:`ZkGroup.write_offsets`). Offsets alternate between 0 and the end of one
message, so every native commit passes the boundary check. The groups are chosen so
that the broker at ``--grpc`` coordinates them and holds the topic, so the native
figure is one broker's coordinator without forwarding. Counted: calls x partitions per
call, for calls that succeeded.

Groups carry a random run id; everything a run creates is removed at the end (native
members leave their ephemeral groups, the ZooKeeper groups are deleted), except the
topics, which later runs reuse.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

from rill.client.grpc_client import AdminClient, error_name
from rill.client.cli.common import CliError, positive_float, positive_int, topic_name
from rill.client.cli.perf.commit_client import CommitClient, data_plane
from rill.client.cli.perf.group_members import (CLIENT_ID, SETUP_HEARTBEAT_S, Member, MemberLoop, Timed, check_loops,
                                                ensure_topic, latency_figures, leave_all, run_id,
                                                stop_loops, wait_stable)
from rill.client.cli.perf.mode_comparison import (comparison_arguments, ratio, ratio_text, start_zk, stop_zk,
                                                  wait_cluster)
from rill.client.cli.perf.report import report
from rill.client.simple import SimpleProducer
from rill.client.zookeeper.consumer_nodes import ZkGroup
from rill.client.zookeeper.streams import PartitionKey

PLACEMENT_TRIES = 200  # group names tried per client to find one the --grpc broker coordinates


def add_parsers(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``commit-modes`` to ``rill perf``'s subcommands."""
    commits = kinds.add_parser("commit-modes", help="partition offsets committed per second: native coordinator "
                                                    "vs ZooKeeper (0.7), same partitions and clients")
    comparison_arguments(commits, "perf-modes")
    commits.add_argument("-t", "--topic", type=topic_name, default="perf-commit-modes",
                         help="topic whose offsets are committed, created if missing on the --grpc broker "
                              "(default: perf-commit-modes)")
    commits.add_argument("--partitions", type=positive_int, default=100, metavar="N",
                         help="partitions per commit (default: 100); an existing topic must have this many")
    commits.add_argument("--clients", type=positive_int, default=1, metavar="N",
                         help="committing clients in each mode, each with a group and a connection of its own "
                              "(default: 1)")
    commits.add_argument("--seconds", type=positive_float, default=10.0, help="duration of each mode (default: 10)")
    commits.add_argument("--session-timeout-ms", type=positive_int, default=10_000, metavar="MS",
                         help="session timeout of the native members (default: 10000)")
    commits.add_argument("--heartbeat-interval-ms", type=positive_int, default=1000, metavar="MS",
                         help="native members heartbeat this often between commits (default: 1000)")
    commits.set_defaults(run=run_commit_modes, broker=None)


# ---------------------------------------------------------------- native


def local_groups(args: argparse.Namespace, admin: AdminClient, prefix: str) -> list[str]:
    """Create ``--clients`` ephemeral groups (``prefix-<i>-<k>``) coordinated by the broker ``admin`` talks to.

    CreateGroup is forwarded to the group's coordinator and names it; a group placed
    elsewhere is deleted there and the next name is tried.
    """
    me = admin.describe_cluster().controller_broker_id
    names: list[str] = []
    for i in range(args.clients):
        for k in range(PLACEMENT_TRIES):
            name = f"{prefix}-{i}-{k}"
            created = admin.create_group(name, [args.topic], session_timeout_ms=args.session_timeout_ms,
                                         strategy="range", ephemeral=True)
            if created.error_code:
                raise CliError(f"cannot create group {name!r}: {error_name(created.error_code)}")
            where = created.coordinator
            if not where.broker_id or where.broker_id == me:
                names.append(name)
                break
            with AdminClient(f"{where.host}:{where.grpc_port}", args.timeout, client_id=CLIENT_ID) as other:
                other.delete_groups([name])
        else:
            raise CliError(f"none of {PLACEMENT_TRIES} group names tried is coordinated by broker {me}")
    return names


def native_commits(args: argparse.Namespace, admin: AdminClient, ends: dict[int, int], rid: str) -> dict[str, float]:
    groups = local_groups(args, admin, f"{args.group_prefix}-native-{rid}")
    members = [Member(args.grpc, group, args.timeout, args.session_timeout_ms) for group in groups]
    loops: list[MemberLoop] = []
    try:
        loops = [MemberLoop(m, SETUP_HEARTBEAT_S).start() for m in members]
        for group, loop in zip(groups, loops):
            wait_stable(admin, group, [loop], 60.0)
        stop_loops(loops)
        check_loops(loops)
        clients = [CommitClient(m, ends, args.heartbeat_interval_ms / 1000) for m in members]
        timed = Timed(args.seconds, args.quiet, "native commit calls", lambda: sum(c.calls for c in clients))
        cpu0 = time.process_time()
        elapsed = timed.run([_commit_target(c, timed) for c in clients])
        cpu = time.process_time() - cpu0
    finally:
        stop_loops(loops)
        leave_all(members)
    calls = sum(c.calls for c in clients)
    offsets = sum(c.offsets for c in clients)
    return {"seconds": elapsed, "calls": calls, "offsets": offsets, "offsets_per_s": offsets / elapsed,
            "calls_per_s": calls / elapsed, "errors": sum(c.errors for c in clients),
            "client_cpu": cpu / elapsed, **latency_figures([s for c in clients for s in c.samples])}


def _commit_target(client: CommitClient, timed: Timed) -> Callable[[], None]:
    return lambda: client.run(lambda: timed.deadline)


# ---------------------------------------------------------------- ZooKeeper


class ZkCommitClient:
    """One ZooKeeper session writing a group's offsets of every partition per call, as 0.7's commitOffsets."""

    def __init__(self, connect: str, group: str, keys: Sequence[PartitionKey], ends: dict[int, int],
                 timeout: float) -> None:
        self.zk = start_zk(connect, timeout)
        self.group = ZkGroup(self.zk, group, f"{CLIENT_ID}-{group}")
        self.requests = [{k: (ends[k.partition] if end else 0) for k in keys} for end in (False, True)]
        self.calls = 0
        self.offsets = 0
        self.samples: list[int] = []

    def warm_up(self) -> None:
        """The first write creates the offset nodes (and their parents): not timed."""
        self.group.write_offsets(self.requests[1])

    def run(self, deadline: float) -> None:
        write, requests = self.group.write_offsets, self.requests
        i = 0
        while time.perf_counter() < deadline:
            request = requests[i & 1]
            i += 1
            t0 = time.perf_counter_ns()
            write(request)
            self.samples.append(time.perf_counter_ns() - t0)
            self.calls += 1
            self.offsets += len(request)

    def close(self) -> None:
        try:
            self.zk.delete(self.group.dirs.root, recursive=True)
        finally:
            stop_zk(self.zk)


def zk_commits(args: argparse.Namespace, broker_id: int, ends: dict[int, int], rid: str) -> dict[str, float]:
    keys = [PartitionKey(args.topic, broker_id, p) for p in range(args.partitions)]
    clients: list[ZkCommitClient] = []
    try:
        for i in range(args.clients):
            clients.append(ZkCommitClient(args.zookeeper, f"{args.group_prefix}-zk-{rid}-{i}", keys, ends,
                                          args.timeout))
        for c in clients:
            c.warm_up()
        timed = Timed(args.seconds, args.quiet, "ZooKeeper commit calls", lambda: sum(c.calls for c in clients))
        cpu0 = time.process_time()
        elapsed = timed.run([_zk_target(c, timed) for c in clients])
        cpu = time.process_time() - cpu0
    finally:
        for c in clients:
            c.close()
    calls = sum(c.calls for c in clients)
    offsets = sum(c.offsets for c in clients)
    return {"seconds": elapsed, "calls": calls, "offsets": offsets, "offsets_per_s": offsets / elapsed,
            "calls_per_s": calls / elapsed, "errors": 0, "client_cpu": cpu / elapsed,
            **latency_figures([s for c in clients for s in c.samples])}


def _zk_target(client: ZkCommitClient, timed: Timed) -> Callable[[], None]:
    return lambda: client.run(timed.deadline)


# ---------------------------------------------------------------- the command


def run_commit_modes(args: argparse.Namespace) -> int:
    rid = run_id()
    with AdminClient(args.grpc, args.timeout, client_id=CLIENT_ID) as admin:
        zk = start_zk(args.zookeeper, args.timeout)
        try:
            wait_cluster(admin, zk)
        finally:
            stop_zk(zk)
        broker_id = admin.describe_cluster().controller_broker_id
        ensure_topic(admin, args.topic, args.partitions)
        host, port = data_plane_of(args, admin, broker_id)
        with SimpleProducer(host, port, timeout=args.timeout) as producer:
            acks = producer.send_many({(args.topic, p): [b"rill perf commit-modes"] for p in range(args.partitions)})
        ends = {p: ack.next_offset for (_, p), ack in acks.items()}
        native = native_commits(args, admin, ends, rid)
    zookeeper = zk_commits(args, broker_id, ends, rid)
    factor = ratio(native["offsets_per_s"], zookeeper["offsets_per_s"])
    result = {"benchmark": "commit-modes", "clients": args.clients, "partitions": args.partitions,
              "seconds": args.seconds, "broker_id": broker_id, "native": native, "zookeeper": zookeeper,
              "ratio_native_to_zookeeper": factor}
    lines = [f"rill perf commit-modes: {args.clients} client(s), {args.partitions} partition offsets per commit, "
             f"{args.seconds:g} s per mode, coordinator = broker {broker_id}"]
    for name, figures in (("native   ", native), ("zookeeper", zookeeper)):
        lines.append(f"  {name} {figures['offsets_per_s']:>12,.0f} partition offsets/s "
                     f"({figures['calls_per_s']:,.1f} commits/s, p50 {figures['p50_ms']:.2f} ms, "
                     f"p99 {figures['p99_ms']:.2f} ms, {figures['errors']:.0f} refused, "
                     f"client CPU {figures['client_cpu']:.0%})")
    lines.append(f"  ratio native / zookeeper: {ratio_text(factor)}")
    report(args, result, lines)
    return 0


def data_plane_of(args: argparse.Namespace, admin: AdminClient, broker_id: int) -> tuple[str, int]:
    """The data-plane address of the broker at --grpc (DescribeCluster names every broker's port)."""
    for broker in admin.describe_cluster().brokers:
        if broker.broker_id == broker_id:
            return broker.host or args.grpc.rsplit(":", 1)[0], int(broker.port)
    return data_plane(args, admin)


__all__ = ["add_parsers", "run_commit_modes"]
