"""``rill perf commits|heartbeats``: throughput and latency of a broker's gRPC group coordinator.

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

``rill perf rebalance`` (:mod:`rill.client.cli.perf.rebalance`) shares the members and
their helpers (:mod:`rill.client.cli.perf.group_members`). Latencies are round trips
measured by the client (nearest-rank percentiles).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

import grpc

from rill.client.grpc_client import AdminClient, error_name
from rill.client.cli.common import CliError, positive_float, positive_int, topic_name
from rill.client.cli.perf.commit_client import CommitClient, data_plane
from rill.client.cli.perf.group_members import (
    CLIENT_ID, SETUP_HEARTBEAT_S, Member, MemberLoop, Timed, check_loops, closed, create_group, ensure_topic,
    group_arguments, latency_figures, leave_all, rpc, run_id, stop_loops, wait_stable,
)
from rill.client.cli.perf.report import report
from rill.client.simple import SimpleProducer
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import coordinator_pb2_grpc as pb_grpc


def add_parsers(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``commits`` and ``heartbeats`` to ``rill perf``'s subcommands."""
    commits = kinds.add_parser("commits", help="CommitOffsets throughput and latency (gRPC coordinator)")
    group_arguments(commits, "perf-commits")
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
    group_arguments(beats, "perf-heartbeats")
    beats.add_argument("--members", type=positive_int, default=32, metavar="N", help="members of the group (default: 32)")
    beats.add_argument("--clients", type=positive_int, default=4, metavar="N",
                       help="client threads heartbeating the members round-robin, each on its own channel (default: 4)")
    beats.add_argument("--seconds", type=positive_float, default=10.0, help="duration (default: 10)")
    beats.set_defaults(run=run_heartbeats)


# ---------------------------------------------------------------- commits


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


__all__ = ["HeartbeatClient", "add_parsers", "run_commits", "run_heartbeats"]
