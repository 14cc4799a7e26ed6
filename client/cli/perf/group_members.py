"""Shared parts of ``rill perf commits|heartbeats|rebalance|commit-modes``: group members and their loops.

:class:`Member` is one group member on a gRPC channel of its own (register, heartbeat,
commit, leave); :class:`MemberLoop` runs the seed 003 consumer loop for one on a thread.
The helpers bring a group to a stable generation, check its assignment, make the topic
and the (ephemeral) group a benchmark uses, clean up (every member leaves), and time
worker threads that run together until a deadline (:class:`Timed`, with progress lines).
A transport failure of any call becomes :class:`~rill.client.errors.ConnectionClosed`.
:func:`group_arguments` adds the arguments those benchmarks share.
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from rill.client.grpc_client import AdminClient, error_name
from rill.client.cli.common import CliError, info, positive_int, topic_name
from rill.client.cli.bootstrap import add_grpc_arguments
from rill.client.cli.perf.report import PROGRESS_INTERVAL, percentile
from rill.client.errors import ConnectionClosed
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import coordinator_pb2_grpc as pb_grpc

CLIENT_ID = "rill-perf"
STABLE_POLL_S = 0.002
SETUP_HEARTBEAT_S = 0.02  # heartbeat interval of the member loops that bring members in before timing
MIN_SESSION_TIMEOUT_MS = 6000  # the broker's default group.min.session.timeout.ms


def group_arguments(parser: argparse.ArgumentParser, prefix: str) -> None:
    """The arguments of ``commits``, ``heartbeats`` and ``rebalance``: --grpc, --group-prefix, sessions, output."""
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
