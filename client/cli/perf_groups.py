"""``rill perf commits|heartbeats|rebalance``: benchmarks of a broker's gRPC group coordinator.

Each talks gRPC to one broker (``--grpc HOST:PORT``), gives every client thread its own
channel, prints its figures (text on stderr, or one JSON object on stdout with
``--json``) and the command line, and cleans up: every member it registered leaves
with LeaveGroup, and its groups are ephemeral, so they are gone afterwards. Group
names carry a random run id, so runs never meet each other's groups.

- ``commits``: creates a topic with ``--partitions`` partitions (Admin CreateTopic)
  and appends one message to each partition through the data plane, so 0 and that
  message's end are both message boundaries. Each of ``--clients`` threads is a
  registered **member** and commits with its consumer id and generation, the path a
  consumer takes (member, generation, ownership and boundary checks, then an fsync of
  the offsets log before the answer). By default every client has a group of its own,
  so it owns, and commits, every partition in each call; the clients' commits run in
  parallel and share fsyncs. With ``--shared-group`` all clients are members of one
  group and each commits the partitions the assignor gave it (``--partitions`` split
  over ``--clients``): one real consumer group, whose commits are serialized by the
  group's lock (one fsync each). Commits without a consumer id are not measured: they
  skip the membership checks and, in one shared group, would only overwrite one
  another's offsets. Offsets alternate between 0 and the message's end. Members
  heartbeat every ``--heartbeat-interval-ms`` (outside the commit timings).
- ``heartbeats``: registers ``--members`` members in one group (no topics), then
  ``--clients`` threads heartbeat them round-robin, one call at a time each, as fast
  as they can; every answer must be NONE.
- ``rebalance``: creates a topic and a group, brings ``--members`` members in (each a
  thread running the seed 003 loop: register, heartbeat every
  ``--heartbeat-interval-ms``, re-register with its id on REBALANCE_IN_PROGRESS) and
  waits until the group is stable. Each round then has one member leave (LeaveGroup;
  the others rebalance, timed as ``leave``) and a new member join: the figure is the
  time from the new member's RegisterConsumer call until every member, old and new,
  holds its assignment of the new generation (its RegisterConsumer of that generation
  has returned). Members learn of a rebalance from their next heartbeat, so the
  heartbeat interval bounds how soon they re-register. Every stable assignment is
  checked: each partition owned by exactly one member.

Latencies are round trips measured by the client (nearest-rank percentiles).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

import grpc

from rill.client.admin import AdminClient, error_name
from rill.client.cli.common import CliError, positive_float, positive_int, topic_name
from rill.client.cli.groups import add_grpc_arguments
from rill.client.cli.perf import report
from rill.client.cli.perf_group_members import (
    CLIENT_ID, SETUP_HEARTBEAT_S, Member, MemberLoop, Timed, check_loops, closed, create_group, ensure_topic,
    latency_figures, leave_all, rpc, run_id, stop_loops, wait_stable,
)
from rill.client.cli.perf_rebalance import run_rebalance
from rill.client.connection import parse_address
from rill.client.simple import SimpleProducer
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import coordinator_pb2_grpc as pb_grpc

MIN_SESSION_TIMEOUT_MS = 6000  # the broker's default group.min.session.timeout.ms


def add_parsers(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``commits``, ``heartbeats`` and ``rebalance`` to ``rill perf``'s subcommands."""
    commits = kinds.add_parser("commits", help="CommitOffsets throughput and latency (gRPC coordinator)")
    _common(commits, "perf-commits")
    commits.add_argument("-t", "--topic", type=topic_name, default="perf-commits",
                         help="topic to commit offsets of, created if missing (default: perf-commits)")
    commits.add_argument("--partitions", type=positive_int, default=100, metavar="N",
                         help="partitions of the topic (default: 100); an existing topic must have this many")
    commits.add_argument("--clients", type=positive_int, default=1, metavar="N",
                         help="client threads, each a member on its own channel (default: 1)")
    commits.add_argument("--seconds", type=positive_float, default=10.0, help="duration (default: 10)")
    commits.add_argument("--shared-group", action="store_true",
                         help="all clients in one group, each committing its assigned partitions "
                              "(default: a group per client, each committing every partition)")
    commits.add_argument("-b", "--broker", metavar="HOST:PORT", default=None,
                         help="data-plane address to produce the first messages to "
                              "(default: the --grpc host and the port DescribeCluster gives)")
    commits.add_argument("--heartbeat-interval-ms", type=positive_int, default=1000, metavar="MS",
                         help="each member heartbeats this often between commits (default: 1000)")
    commits.set_defaults(run=run_commits)

    beats = kinds.add_parser("heartbeats", help="Heartbeat throughput and latency (gRPC coordinator)")
    _common(beats, "perf-heartbeats")
    beats.add_argument("--members", type=positive_int, default=32, metavar="N", help="members of the group (default: 32)")
    beats.add_argument("--clients", type=positive_int, default=4, metavar="N",
                       help="client threads heartbeating the members round-robin, each on its own channel (default: 4)")
    beats.add_argument("--seconds", type=positive_float, default=10.0, help="duration (default: 10)")
    beats.set_defaults(run=run_heartbeats)

    rebalance = kinds.add_parser("rebalance", help="time for a group to rebalance when a member joins")
    _common(rebalance, "perf-rebalance")
    rebalance.add_argument("-t", "--topic", type=topic_name, default="perf-rebalance",
                           help="topic the group consumes, created if missing (default: perf-rebalance)")
    rebalance.add_argument("--partitions", type=positive_int, default=256, metavar="N",
                           help="partitions of the topic (default: 256); an existing topic must have this many")
    rebalance.add_argument("--members", type=positive_int, default=32, metavar="N", help="group size (default: 32)")
    rebalance.add_argument("--rounds", type=positive_int, default=5, metavar="N",
                           help="rounds of one member leaving and one joining (default: 5)")
    rebalance.add_argument("--heartbeat-interval-ms", type=positive_int, default=20, metavar="MS",
                           help="each member heartbeats this often (default: 20)")
    rebalance.add_argument("--strategy", choices=("range", "roundrobin", "sticky"), default="range")
    rebalance.add_argument("--stable-timeout", type=positive_float, default=60.0, metavar="SECONDS",
                           help="give up if the group is not stable this long after a change (default: 60)")
    rebalance.set_defaults(run=run_rebalance)


def _common(parser: argparse.ArgumentParser, prefix: str) -> None:
    add_grpc_arguments(parser)
    parser.add_argument("--group-prefix", type=topic_name, default=prefix, metavar="NAME",
                        help=f"groups are named PREFIX-<run id>[-<client>] (default: {prefix})")
    parser.add_argument("--session-timeout-ms", type=session_timeout, default=10_000, metavar="MS",
                        help="session timeout of the members (default: 10000; the broker's minimum is 6000)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def session_timeout(text: str) -> int:
    value = positive_int(text)
    if value < MIN_SESSION_TIMEOUT_MS:
        raise argparse.ArgumentTypeError(f"expected at least {MIN_SESSION_TIMEOUT_MS} (the broker's minimum), got {value}")
    return value


# ---------------------------------------------------------------- commits


class CommitClient:
    """One member committing its partitions in a loop (and heartbeating between commits)."""

    def __init__(self, member: Member, ends: dict[int, int], heartbeat_interval: float) -> None:
        self.member = member
        self.ends = ends
        self.heartbeat_interval = heartbeat_interval
        self.calls = 0
        self.offsets = 0
        self.errors = 0
        self.heartbeats = 0
        self.rejoins = 0
        self.samples: list[int] = []
        self.requests: list[pb.CommitOffsetsRequest] = []

    def prepare(self) -> None:
        """The two requests it alternates between (offsets 0, offsets at the message's end)."""
        m = self.member
        self.requests = [pb.CommitOffsetsRequest(
            client_id=CLIENT_ID, consumer_group=m.group, consumer_id=m.consumer_id, generation=m.generation,
            offsets=[pb.PartitionOffset(topic=t, partition=p, offset=self.ends[p] if end else 0)
                     for t, p in m.partitions]) for end in (False, True)]

    def run(self, deadline: Callable[[], float]) -> None:
        m, stub, timeout = self.member, self.member.stub.CommitOffsets, self.member.timeout
        self.prepare()
        next_beat = time.perf_counter() + self.heartbeat_interval
        i = 0
        end = deadline()
        while True:
            now = time.perf_counter()
            if now >= end:
                return
            if now >= next_beat:
                self.heartbeats += 1
                next_beat = now + self.heartbeat_interval
                if m.heartbeat() != pb.NONE:
                    self._rejoin()
                    continue
            request = self.requests[i & 1]
            i += 1
            t0 = time.perf_counter_ns()
            try:
                response = stub(request, timeout=timeout)
            except grpc.RpcError as exc:
                raise closed(m.address, exc) from exc
            self.samples.append(time.perf_counter_ns() - t0)
            if response.error_code == pb.NONE:
                self.calls += 1
                self.offsets += len(request.offsets)
            else:
                self.errors += 1
                self._rejoin()

    def _rejoin(self) -> None:
        self.rejoins += 1
        self.member.register()
        self.prepare()


def data_plane(args: argparse.Namespace, admin: AdminClient) -> tuple[str, int]:
    if args.broker:
        try:
            return parse_address(args.broker)
        except ValueError as exc:
            raise CliError(f"--broker: {exc}", 2) from None
    brokers = admin.describe_cluster().brokers
    if not brokers:
        raise CliError("DescribeCluster named no broker: give the data-plane address with --broker")
    try:
        host = parse_address(args.grpc)[0]
    except ValueError as exc:
        raise CliError(f"--grpc: {exc}", 2) from None
    return host, int(brokers[0].port)


def run_commits(args: argparse.Namespace) -> int:
    if args.shared_group and args.clients > args.partitions:
        raise CliError(f"--shared-group with {args.clients} clients needs at least as many partitions "
                       f"(got --partitions {args.partitions}): some clients would own nothing", 2)
    rid = run_id()
    with AdminClient(args.grpc, args.timeout, client_id=CLIENT_ID) as admin:
        ensure_topic(admin, args.topic, args.partitions)
        host, port = data_plane(args, admin)
        with SimpleProducer(host, port, timeout=args.timeout) as producer:
            acks = producer.send_many({(args.topic, p): [b"rill perf commits"] for p in range(args.partitions)})
        ends = {p: ack.next_offset for (_, p), ack in acks.items()}
        groups = ([f"{args.group_prefix}-{rid}"] if args.shared_group
                  else [f"{args.group_prefix}-{rid}-{i}" for i in range(args.clients)])
        for group in groups:
            create_group(admin, group, [args.topic], args.session_timeout_ms)
        members = [Member(args.grpc, groups[0] if args.shared_group else groups[i], args.timeout,
                          args.session_timeout_ms) for i in range(args.clients)]
        loops: list[MemberLoop] = []
        try:
            loops = [MemberLoop(m, SETUP_HEARTBEAT_S).start() for m in members]
            for group in groups:
                wait_stable(admin, group, [lp for lp in loops if lp.member.group == group], 60.0)
            stop_loops(loops)
            check_loops(loops)
            clients = [CommitClient(m, ends, args.heartbeat_interval_ms / 1000) for m in members]
            timed = Timed(args.seconds, args.quiet, "commit calls", lambda: sum(c.calls for c in clients))
            elapsed = timed.run([_bind(c.run, lambda: timed.deadline) for c in clients])
        finally:
            stop_loops(loops)
            leave_all(members)
    calls = sum(c.calls for c in clients)
    offsets = sum(c.offsets for c in clients)
    samples = [s for c in clients for s in c.samples]
    lat = latency_figures(samples)
    per_call = offsets / calls if calls else 0.0
    result = {
        "benchmark": "commits", "clients": args.clients, "partitions": args.partitions,
        "mode": "shared-group" if args.shared_group else "group-per-client", "groups": len(groups),
        "seconds": elapsed, "calls": calls, "calls_per_s": calls / elapsed, "offsets": offsets,
        "offsets_per_s": offsets / elapsed, "partitions_per_call": per_call, "errors": sum(c.errors for c in clients),
        "rejoins": sum(c.rejoins for c in clients), "heartbeats": sum(c.heartbeats for c in clients),
        "heartbeat_interval_ms": args.heartbeat_interval_ms, **lat,
    }
    mode = (f"one group, {args.clients} members, {per_call:.1f} partitions per call" if args.shared_group
            else f"{args.clients} group(s) of one member, all {args.partitions} partitions per call")
    report(args, result, [
        f"rill perf commits: {calls:,} CommitOffsets calls in {elapsed:.2f} s from {args.clients} client(s) ({mode})",
        f"  {result['calls_per_s']:,.0f} calls/s, {result['offsets_per_s']:,.0f} partition offsets/s",
        f"  latency p50 {lat['p50_ms']:.2f} ms, p99 {lat['p99_ms']:.2f} ms, max {lat['max_ms']:.2f} ms; "
        f"{result['errors']} refused, {result['rejoins']} re-registrations",
    ])
    return 0


def _bind(fn: Callable[[Callable[[], float]], None], arg: Callable[[], float]) -> Callable[[], None]:
    return lambda: fn(arg)


# ---------------------------------------------------------------- heartbeats


class HeartbeatClient:
    """Heartbeats its members round-robin on its own channel, one call at a time."""

    def __init__(self, address: str, members: Sequence[Member], timeout: float) -> None:
        self.address = address
        self.channel = grpc.insecure_channel(address)
        self.stub = pb_grpc.GroupCoordinatorStub(self.channel)  # type: ignore[no-untyped-call]
        self.requests = [pb.HeartbeatRequest(client_id=CLIENT_ID, consumer_group=m.group, consumer_id=m.consumer_id,
                                             generation=m.generation) for m in members]
        self.timeout = timeout
        self.calls = 0
        self.errors: dict[str, int] = {}
        self.samples: list[int] = []

    def warm_up(self) -> None:
        rpc(self.address, self.stub.Heartbeat, self.requests[0], self.timeout)

    def run(self, deadline: Callable[[], float]) -> None:
        beat, requests, timeout = self.stub.Heartbeat, self.requests, self.timeout
        end = deadline()
        n = len(requests)
        i = 0
        while time.perf_counter() < end:
            t0 = time.perf_counter_ns()
            try:
                response = beat(requests[i % n], timeout=timeout)
            except grpc.RpcError as exc:
                raise closed(self.address, exc) from exc
            self.samples.append(time.perf_counter_ns() - t0)
            i += 1
            self.calls += 1
            if response.error_code != pb.NONE:
                name = error_name(response.error_code)
                self.errors[name] = self.errors.get(name, 0) + 1

    def close(self) -> None:
        self.channel.close()


def run_heartbeats(args: argparse.Namespace) -> int:
    group = f"{args.group_prefix}-{run_id()}"
    clients: list[HeartbeatClient] = []
    with AdminClient(args.grpc, args.timeout, client_id=CLIENT_ID) as admin:
        create_group(admin, group, [], args.session_timeout_ms)
        members = [Member(args.grpc, group, args.timeout, args.session_timeout_ms) for _ in range(args.members)]
        loops: list[MemberLoop] = []
        try:
            loops = [MemberLoop(m, SETUP_HEARTBEAT_S).start() for m in members]
            wait_stable(admin, group, loops, 60.0)
            stop_loops(loops)
            check_loops(loops)
            shares = [members[i::args.clients] or [members[i % len(members)]] for i in range(args.clients)]
            clients = [HeartbeatClient(args.grpc, share, args.timeout) for share in shares]
            for c in clients:
                c.warm_up()
            timed = Timed(args.seconds, args.quiet, "heartbeats", lambda: sum(c.calls for c in clients))
            elapsed = timed.run([_bind(c.run, lambda: timed.deadline) for c in clients])
        finally:
            stop_loops(loops)
            for c in clients:
                c.close()
            leave_all(members)
    calls = sum(c.calls for c in clients)
    errors: dict[str, int] = {}
    for c in clients:
        for name, n in c.errors.items():
            errors[name] = errors.get(name, 0) + n
    lat = latency_figures([s for c in clients for s in c.samples])
    result = {"benchmark": "heartbeats", "members": args.members, "clients": args.clients, "seconds": elapsed,
              "heartbeats": calls, "heartbeats_per_s": calls / elapsed, "errors": errors, **lat}
    refused = ", ".join(f"{n} {name}" for name, n in sorted(errors.items())) or "none refused"
    report(args, result, [
        f"rill perf heartbeats: {calls:,} heartbeats of {args.members} members in one group, "
        f"{args.clients} client thread(s), {elapsed:.2f} s",
        f"  {result['heartbeats_per_s']:,.0f} heartbeats/s; latency p50 {lat['p50_ms']:.2f} ms, "
        f"p99 {lat['p99_ms']:.2f} ms, max {lat['max_ms']:.2f} ms; {refused}",
    ])
    if errors:
        raise CliError(f"heartbeats were refused: {refused}")
    return 0


__all__ = ["Member", "MemberLoop", "add_parsers", "run_commits", "run_heartbeats", "run_rebalance"]
