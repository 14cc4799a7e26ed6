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
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from rill.client.admin import AdminClient, error_name
from rill.client.cli.common import CliError, info, positive_float, positive_int, topic_name
from rill.client.cli.groups import add_grpc_arguments
from rill.client.cli.perf import percentile, report
from rill.client.connection import parse_address
from rill.client.errors import ConnectionClosed
from rill.client.simple import SimpleProducer
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import coordinator_pb2_grpc as pb_grpc

CLIENT_ID = "rill-perf"
PROGRESS_INTERVAL = 5.0
STABLE_POLL_S = 0.002
MIN_SESSION_TIMEOUT_MS = 6000  # the broker's default group.min.session.timeout.ms
SETUP_HEARTBEAT_S = 0.02  # heartbeat interval of the member loops that bring members in before timing


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


# ---------------------------------------------------------------- members


class Member:
    """One group member on a channel of its own: register, heartbeat, commit, leave.

    ``joined[generation]`` is when (``time.perf_counter()``) its RegisterConsumer of that
    generation returned; ``first_register_started`` when its first RegisterConsumer was sent.
    """

    def __init__(self, address: str, group: str, timeout: float, session_timeout_ms: int) -> None:
        self.address = address
        self.group = group
        self.timeout = timeout
        self.session_timeout_ms = session_timeout_ms
        self.channel = grpc.insecure_channel(address)
        self.stub = pb_grpc.GroupCoordinatorStub(self.channel)  # type: ignore[no-untyped-call]
        self.consumer_id = ""
        self.generation = 0
        self.partitions: list[tuple[str, int]] = []
        self.joined: dict[int, float] = {}
        self.first_register_started = 0.0
        self.registering = False
        self.unknown = 0  # times the coordinator had forgotten it (UNKNOWN_MEMBER): registered again

    def register(self) -> None:
        """RegisterConsumer until it succeeds (UNKNOWN_MEMBER: again with a fresh id); raises on other errors."""
        self.registering = True
        try:
            while True:
                if not self.first_register_started:
                    self.first_register_started = time.perf_counter()
                response = rpc(self.address, self.stub.RegisterConsumer, pb.RegisterConsumerRequest(
                    client_id=CLIENT_ID, consumer_group=self.group, consumer_id=self.consumer_id,
                    session_timeout=self.session_timeout_ms), self.timeout)
                returned = time.perf_counter()
                if response.error_code == pb.UNKNOWN_MEMBER and self.consumer_id:
                    self.consumer_id, self.unknown = "", self.unknown + 1
                    continue
                if response.error_code != pb.NONE:
                    raise CliError(f"RegisterConsumer in group {self.group!r}: {error_name(response.error_code)}")
                self.consumer_id, self.generation = response.consumer_id, response.generation
                self.partitions = [(p.topic, p.partition) for p in response.partitions_to_own]
                self.joined[response.generation] = returned
                return
        finally:
            self.registering = False

    def heartbeat(self) -> int:
        response = rpc(self.address, self.stub.Heartbeat, pb.HeartbeatRequest(
            client_id=CLIENT_ID, consumer_group=self.group, consumer_id=self.consumer_id,
            generation=self.generation), self.timeout)
        return int(response.error_code)

    def leave(self) -> None:
        if self.consumer_id:
            rpc(self.address, self.stub.LeaveGroup, pb.LeaveGroupRequest(
                client_id=CLIENT_ID, consumer_group=self.group, consumer_id=self.consumer_id), self.timeout)
            self.consumer_id = ""

    def close(self) -> None:
        self.channel.close()


def rpc(address: str, method: Any, request: Any, timeout: float) -> Any:
    """One call; a transport failure becomes ConnectionClosed (an expected error for the CLI)."""
    try:
        return method(request, timeout=timeout)
    except grpc.RpcError as exc:
        raise closed(address, exc) from exc


def closed(address: str, exc: Any) -> ConnectionClosed:
    code = exc.code() if hasattr(exc, "code") else None
    return ConnectionClosed(f"gRPC call to {address} failed: {code.name if code else 'error'}: "
                            f"{exc.details() if hasattr(exc, 'details') else exc}")


class MemberLoop:
    """The seed 003 consumer loop on a thread: register, heartbeat every ``interval`` s,
    re-register with its id on REBALANCE_IN_PROGRESS (or ILLEGAL_GENERATION)."""

    def __init__(self, member: Member, interval: float) -> None:
        self.member = member
        self.interval = interval
        self.stopping = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="rill-perf-member", daemon=True)

    def start(self) -> MemberLoop:
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            self.member.register()
            while not self.stopping.wait(self.interval):
                code = self.member.heartbeat()
                if code in (pb.REBALANCE_IN_PROGRESS, pb.ILLEGAL_GENERATION, pb.UNKNOWN_MEMBER):
                    self.member.register()
                elif code != pb.NONE:
                    raise CliError(f"Heartbeat in group {self.member.group!r}: {error_name(code)}")
        except BaseException as exc:  # handed to the main thread
            self.error = exc

    def stop(self, timeout: float) -> None:
        """Stop heartbeating (at once unless it is in a call); waits up to ``timeout`` s for the thread."""
        self.stopping.set()
        self.thread.join(timeout)


def stop_loops(loops: Sequence[MemberLoop]) -> None:
    """Stop every loop before anyone leaves (a loop still running would register its member again).
    A member stuck in a call (a RegisterConsumer waiting for a rebalance) is a daemon thread: left behind."""
    for loop in loops:
        loop.stopping.set()
    for loop in loops:
        loop.thread.join(1.0)


def check_loops(loops: Sequence[MemberLoop]) -> None:
    for loop in loops:
        if loop.error is not None:
            raise loop.error


def wait_stable(admin: AdminClient, group: str, loops: Sequence[MemberLoop], timeout: float,
                above: int = 0) -> int:
    """Wait until every member of ``loops`` holds the group's current generation (> ``above``)
    and the coordinator reports the group Stable with exactly these members; that generation."""
    deadline = time.monotonic() + timeout
    members = [loop.member for loop in loops]
    while True:
        check_loops(loops)
        generations = {m.generation for m in members}
        if len(generations) == 1 and not any(m.registering for m in members) and generations.pop() > above:
            info_ = admin.list_groups([group]).groups_info[0]
            if (info_.state == "Stable" and info_.generation == members[0].generation
                    and set(info_.group_members) == {m.consumer_id for m in members}):
                return int(info_.generation)
        if time.monotonic() > deadline:
            raise CliError(f"group {group!r} not stable after {timeout:.0f} s "
                           f"(member generations: {sorted(m.generation for m in members)})")
        time.sleep(STABLE_POLL_S)


def check_assignment(members: Sequence[Member], topic: str, partitions: int) -> None:
    owned = [tp for m in members for tp in m.partitions]
    if sorted(owned) != [(topic, p) for p in range(partitions)]:
        raise CliError(f"the assignment does not cover {topic}'s {partitions} partitions exactly once "
                       f"({len(owned)} owned, {len(set(owned))} distinct)")


def leave_all(members: Sequence[Member]) -> None:
    """Every member leaves (an ephemeral group goes away with its last member); channels close."""
    for m in members:
        try:
            m.leave()
        except ConnectionClosed:
            pass  # it expires after its session timeout instead
        finally:
            m.close()


def run_id() -> str:
    return uuid.uuid4().hex[:8]


def ensure_topic(admin: AdminClient, topic: str, partitions: int) -> None:
    created = admin.create_topic(topic, partitions)
    if created.error_code:
        raise CliError(f"cannot create topic {topic!r} with {partitions} partitions: "
                       f"{created.error_message or error_name(created.error_code)}")


def create_group(admin: AdminClient, group: str, topics: Sequence[str], session_timeout_ms: int,
                 strategy: str = "range") -> None:
    created = admin.create_group(group, topics, session_timeout_ms=session_timeout_ms, strategy=strategy,
                                 ephemeral=True)
    if created.error_code:
        raise CliError(f"cannot create group {group!r}: {error_name(created.error_code)}")


def latency_figures(samples_ns: list[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)
    if not ordered:
        return {"p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
    return {"p50_ms": percentile(ordered, 0.5) / 1e6, "p99_ms": percentile(ordered, 0.99) / 1e6,
            "max_ms": ordered[-1] / 1e6}


class Timed:
    """Worker threads that start together, run until a deadline, and hand back their errors."""

    def __init__(self, seconds: float, quiet: bool, label: str, count: Callable[[], int]) -> None:
        self.seconds = seconds
        self.quiet = quiet
        self.label = label
        self.count = count
        self.start = threading.Event()
        self.deadline = 0.0

    def run(self, targets: Sequence[Callable[[], None]]) -> float:
        errors: list[BaseException] = []

        def wrap(target: Callable[[], None]) -> Callable[[], None]:
            def body() -> None:
                try:
                    self.start.wait()
                    target()
                except BaseException as exc:  # handed to the main thread
                    errors.append(exc)
            return body

        threads = [threading.Thread(target=wrap(t), name=f"rill-perf-{i}", daemon=True) for i, t in enumerate(targets)]
        for t in threads:
            t.start()
        started = time.perf_counter()
        self.deadline = started + self.seconds
        self.start.set()
        next_report = started + PROGRESS_INTERVAL
        for t in threads:
            while t.is_alive():
                t.join(timeout=0.2)
                now = time.perf_counter()
                if now >= next_report and not self.quiet:
                    done = self.count()
                    info(f"  ... {done:,} {self.label}, {done / (now - started):,.0f}/s")
                    next_report = now + PROGRESS_INTERVAL
        elapsed = time.perf_counter() - started
        if errors:
            raise errors[0]
        return elapsed


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
    host = args.grpc.rsplit(":", 1)[0] if ":" in args.grpc else args.grpc
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


# ---------------------------------------------------------------- rebalance


def run_rebalance(args: argparse.Namespace) -> int:
    group = f"{args.group_prefix}-{run_id()}"
    interval = args.heartbeat_interval_ms / 1000
    loops: list[MemberLoop] = []
    gone: list[Member] = []
    rounds: list[dict[str, Any]] = []
    with AdminClient(args.grpc, args.timeout, client_id=CLIENT_ID) as admin:
        ensure_topic(admin, args.topic, args.partitions)
        create_group(admin, group, [args.topic], args.session_timeout_ms, args.strategy)

        def new_member() -> MemberLoop:
            return MemberLoop(Member(args.grpc, group, args.timeout, args.session_timeout_ms), interval)

        try:
            started = time.perf_counter()
            loops = [new_member().start() for _ in range(args.members)]
            generation = wait_stable(admin, group, loops, args.stable_timeout)
            check_assignment([lp.member for lp in loops], args.topic, args.partitions)
            if not args.quiet:
                info(f"  {args.members} members stable at generation {generation} "
                     f"after {time.perf_counter() - started:.2f} s")
            for n in range(1, args.rounds + 1):
                leaving = loops.pop(0)
                leaving.stop(args.timeout)
                check_loops([leaving])
                t_leave = time.perf_counter()
                leaving.member.leave()
                gone.append(leaving.member)
                left_at = wait_stable(admin, group, loops, args.stable_timeout, above=generation)
                leave_s = max(lp.member.joined[left_at] for lp in loops) - t_leave
                check_assignment([lp.member for lp in loops], args.topic, args.partitions)
                joining = new_member()
                loops.append(joining.start())
                joined_at = wait_stable(admin, group, loops, args.stable_timeout, above=left_at)
                if min(joining.member.joined) != joined_at:
                    raise CliError(f"round {n}: the new member's first RegisterConsumer answered generation "
                                   f"{min(joining.member.joined)}, and the group settled at {joined_at}: "
                                   "another change overlapped the round")
                join_s = max(lp.member.joined[joined_at] for lp in loops) - joining.member.first_register_started
                check_assignment([lp.member for lp in loops], args.topic, args.partitions)
                rounds.append({"round": n, "join_s": join_s, "leave_s": leave_s, "generation": joined_at,
                               "generations": joined_at - left_at})
                if not args.quiet:
                    info(f"  round {n}: join {join_s * 1000:.0f} ms (generation {joined_at}), "
                         f"leave {leave_s * 1000:.0f} ms")
                generation = joined_at
        finally:
            stop_loops(loops)
            leave_all([lp.member for lp in loops] + gone)
    joins = [r["join_s"] for r in rounds]
    leaves = [r["leave_s"] for r in rounds]
    result = {
        "benchmark": "rebalance", "members": args.members, "partitions": args.partitions, "strategy": args.strategy,
        "heartbeat_interval_ms": args.heartbeat_interval_ms, "session_timeout_ms": args.session_timeout_ms,
        "rounds": rounds, "join_median_s": statistics.median(joins), "join_max_s": max(joins),
        "leave_median_s": statistics.median(leaves), "leave_max_s": max(leaves),
        "unknown_member_rejoins": sum(m.unknown for m in [lp.member for lp in loops] + gone),
    }
    report(args, result, [
        f"rill perf rebalance: {args.members} members, {args.partitions} partitions ({args.strategy}), "
        f"heartbeat every {args.heartbeat_interval_ms} ms, {args.rounds} round(s) of one leave and one join",
        "  join (new member's RegisterConsumer until every member holds the new generation): "
        + ", ".join(f"{s * 1000:.0f}" for s in joins) + " ms",
        f"  join median {result['join_median_s'] * 1000:.0f} ms, max {result['join_max_s'] * 1000:.0f} ms; "
        f"leave (LeaveGroup until the rest hold the new generation) median "
        f"{result['leave_median_s'] * 1000:.0f} ms, max {result['leave_max_s'] * 1000:.0f} ms",
    ])
    return 0


__all__ = ["Member", "MemberLoop", "add_parsers", "run_commits", "run_heartbeats", "run_rebalance"]
