"""``rill perf rebalance-modes``: a group forming, native coordinator against ZooKeeper (0.7) mode.

``--members`` consumers join one new group over ``--topics`` topics of ``--partitions``
cluster-wide partitions each, split evenly over the live brokers (each broker holds
``partitions / brokers`` of every topic, the 0.7 layout). The topics are created on
every broker when missing, and every partition gets one message if it is empty.

Each round times both modes, native first, each with a group of its own:

- native: :class:`~rill.client.consumer.Consumer` instances, one thread each running
  ``poll()`` (auto-commit off, so every generation starts each partition from the
  earliest offset);
- ZooKeeper: :class:`~rill.client.zookeeper.ZkConsumer` instances, one thread each
  calling ``subscribe()`` and then ``poll()`` (auto-commit off, ``autooffset.reset``
  smallest).

The consumers are built (and the ZooKeeper sessions connected) before the clock starts;
the clock starts when every thread is released at once (native: its first ``poll()``
registers it; ZooKeeper: ``subscribe()`` registers it). It stops at the first check
(every ``CHECK_S``) that finds every partition owned by exactly one consumer, every
consumer's records of every partition it owns delivered under its current assignment
(so each partition is being fetched by its owner), and: native, every member on the
same generation; ZooKeeper, the owner nodes in ZooKeeper, one per partition, naming
the consumer that owns it. The time is that of the check's snapshot of the consumers.

The figure is the median over ``--rounds``; the ratio is ZooKeeper's median over the
native one. Afterwards the consumers are closed (native members leave, so their
ephemeral group goes away) and the ZooKeeper group's nodes are deleted.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable, Collection, Hashable, Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from rill.client.grpc_client import AdminClient, error_name
from rill.client.cli.common import CliError, info, positive_float, positive_int, topic_name
from rill.client.cli.perf.group_members import CLIENT_ID, create_group, run_id
from rill.client.cli.perf.mode_comparison import (comparison_arguments, ratio, ratio_text, start_zk, stop_zk,
                                                  wait_cluster)
from rill.client.cli.perf.report import report
from rill.client.consumer import Consumer, MemberEvicted
from rill.client.simple import SimpleConsumer, SimpleProducer
from rill.client.zookeeper import ZkConsumer
from rill.client.zookeeper.registry import partition_name
from rill.v1 import coordinator_pb2 as pb

CHECK_S = 0.005
POLL_S = 0.05
SETUP_TIMEOUT_S = 30.0

Key = tuple[Any, ...]  # (topic, partition) natively; (topic, broker id, broker partition) in ZooKeeper


def add_parsers(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``rebalance-modes`` to ``rill perf``'s subcommands."""
    p = kinds.add_parser("rebalance-modes", help="time for a new group to own and fetch every partition: native "
                                                 "coordinator vs ZooKeeper (0.7)")
    comparison_arguments(p, "perf-modes")
    p.add_argument("--topic-prefix", type=topic_name, default="perf-rebalance-modes", metavar="NAME",
                   help="topics are PREFIX-0 .. PREFIX-<topics - 1> (default: perf-rebalance-modes)")
    p.add_argument("--topics", type=positive_int, default=8, metavar="N", help="topics (default: 8)")
    p.add_argument("--partitions", type=positive_int, default=32, metavar="N",
                   help="cluster-wide partitions per topic, split evenly over the brokers (default: 32)")
    p.add_argument("--members", type=positive_int, default=32, metavar="N", help="consumers (default: 32)")
    p.add_argument("--rounds", type=positive_int, default=3, metavar="N",
                   help="rounds, each with a fresh group per mode (default: 3)")
    p.add_argument("--heartbeat-interval-ms", type=positive_int, default=3000, metavar="MS",
                   help="native consumers' heartbeat.interval.ms (default: 3000, the consumer's default)")
    p.add_argument("--session-timeout-ms", type=positive_int, default=10_000, metavar="MS",
                   help="native consumers' session.timeout.ms (default: 10000)")
    p.add_argument("--zk-rebalance-backoff-ms", type=positive_int, default=2000, metavar="MS",
                   help="ZooKeeper consumers' rebalance.backoff.ms (default: 2000, as 0.7)")
    p.add_argument("--zk-rebalance-retries", type=positive_int, default=4, metavar="N",
                   help="ZooKeeper consumers' rebalance.retries.max (default: 4, as 0.7)")
    p.add_argument("--round-timeout", type=positive_float, default=180.0, metavar="SECONDS",
                   help="give up on a round after this long (default: 180)")
    p.set_defaults(run=run_rebalance_modes)


# ---------------------------------------------------------------- topics


def prepare_topics(args: argparse.Namespace, admin: AdminClient, zk: KazooClient) -> tuple[list[str], list[str]]:
    """Create the topics on every broker, wait until the cluster and ZooKeeper show them, fill empty partitions.

    Returns the topic names and the brokers' data-plane addresses.
    """
    wait_cluster(admin, zk)
    brokers = sorted(admin.describe_cluster().brokers, key=lambda b: b.broker_id)
    if not brokers or args.partitions % len(brokers):
        raise CliError(f"--partitions {args.partitions} does not split evenly over {len(brokers)} broker(s)", 2)
    per_broker = args.partitions // len(brokers)
    topics = [f"{args.topic_prefix}-{i}" for i in range(args.topics)]
    for b in brokers:
        with AdminClient(f"{b.host}:{b.grpc_port}", args.timeout, client_id=CLIENT_ID) as at:
            for topic in topics:
                created = at.create_topic(topic, per_broker)
                if created.error_code:
                    raise CliError(f"broker {b.broker_id}: cannot create {topic!r} with {per_broker} partitions: "
                                   f"{created.error_message or error_name(created.error_code)}")
    ids = {str(b.broker_id) for b in brokers}
    deadline = time.monotonic() + SETUP_TIMEOUT_S
    while not _topics_visible(brokers, topics, args.partitions, zk, ids):
        if time.monotonic() > deadline:
            raise CliError(f"the topics did not reach {args.partitions} partitions in METADATA and ZooKeeper "
                           f"within {SETUP_TIMEOUT_S:.0f} s")
        time.sleep(0.1)
    for b in brokers:
        _fill_empty(b.host, int(b.port), topics, per_broker, args.timeout)
    return topics, [f"{b.host}:{b.port}" for b in brokers]


def _topics_visible(brokers: Sequence[pb.Broker], topics: list[str], partitions: int, zk: KazooClient,
                    ids: set[str]) -> bool:
    for b in brokers:
        with SimpleConsumer(b.host, int(b.port), timeout=10) as c:
            if any(t.partitions != partitions for t in c.metadata(topics).topics):
                return False
    for topic in topics:
        try:
            if not ids <= set(zk.get_children(f"/brokers/topics/{topic}")):
                return False
        except NoNodeError:
            return False
    return True


def _fill_empty(host: str, port: int, topics: list[str], per_broker: int, timeout: float) -> None:
    with SimpleConsumer(host, port, timeout=timeout) as c:
        empty = [(t, p) for t in topics for p in range(per_broker) if c.latest_offset(t, p) == 0]
    if empty:
        with SimpleProducer(host, port, timeout=timeout) as producer:
            producer.send_many({tp: [b"rill perf rebalance-modes"] for tp in empty})


# ---------------------------------------------------------------- one consumer's progress


class Progress:
    """What one consumer owns and what it delivered under that assignment (written by its thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.generation = 0
        self.assignment: frozenset[Key] = frozenset()
        self.delivered: set[Key] = set()
        self.changes = 0  # assignment (or generation) changes seen
        self.evictions = 0
        self.error: BaseException | None = None

    def update(self, generation: int, assignment: frozenset[Key], delivered: Collection[Key]) -> None:
        with self.lock:
            if generation != self.generation or assignment != self.assignment:
                self.generation, self.assignment, self.delivered = generation, assignment, set()
                self.changes += 1
            self.delivered.update(k for k in delivered if k in assignment)

    def view(self) -> tuple[int, frozenset[Key], bool]:
        """(generation, assignment, whether every owned partition was delivered)."""
        with self.lock:
            return self.generation, self.assignment, self.assignment <= self.delivered


def settled(progress: Sequence[Progress], everything: frozenset[Key], same_generation: bool) -> bool:
    """Every partition owned exactly once, each owner has delivered it (and, natively, one generation)."""
    views = [p.view() for p in progress]
    if same_generation and (len({g for g, _, _ in views}) != 1 or views[0][0] <= 0):
        return False
    owned: set[Key] = set()
    count = 0
    for _, assignment, fetched in views:
        if not fetched:
            return False
        owned |= assignment
        count += len(assignment)
    return count == len(everything) and owned == everything


class Round:
    """Member threads released together; timed until ``check`` holds (and ``verify`` agrees)."""

    def __init__(self, bodies: Sequence[Callable[[threading.Event], None]], progress: Sequence[Progress]) -> None:
        self.progress = progress
        self.start = threading.Event()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._wrap(body, p), name=f"rill-perf-modes-{i}", daemon=True)
                        for i, (body, p) in enumerate(zip(bodies, progress))]

    def _wrap(self, body: Callable[[threading.Event], None], progress: Progress) -> Callable[[], None]:
        def run() -> None:
            self.start.wait()
            try:
                body(self.stop)
            except BaseException as exc:  # handed to the main thread
                progress.error = exc
        return run

    def time(self, check: Callable[[], bool], verify: Callable[[], bool], timeout: float, what: str) -> float:
        for t in self.threads:
            t.start()
        started = time.perf_counter()
        self.start.set()
        while True:
            for p in self.progress:
                if p.error is not None:
                    raise p.error
            if check():
                observed = time.perf_counter()
                if verify():
                    return observed - started
            if time.perf_counter() - started > timeout:
                raise CliError(f"{what}: not every partition owned once and fetched after {timeout:.0f} s")
            time.sleep(CHECK_S)

    def finish(self, join_s: float = 30.0) -> None:
        self.stop.set()
        deadline = time.monotonic() + join_s
        for t in self.threads:
            t.join(max(0.1, deadline - time.monotonic()))


# ---------------------------------------------------------------- native


def native_round(args: argparse.Namespace, admin: AdminClient, topics: list[str], servers: list[str],
                 group: str) -> dict[str, Any]:
    create_group(admin, group, topics, args.session_timeout_ms)
    consumers = [Consumer(bootstrap_servers=",".join(servers), group_id=group, client_id=CLIENT_ID,
                          enable_auto_commit=False, auto_offset_reset="earliest",
                          heartbeat_interval_ms=args.heartbeat_interval_ms, session_timeout_ms=args.session_timeout_ms)
                 for _ in range(args.members)]
    for c in consumers:
        c.subscribe(topics)
    progress = [Progress() for _ in consumers]
    run = Round([_native_body(c, p) for c, p in zip(consumers, progress)], progress)
    everything = frozenset((t, p) for t in topics for p in range(args.partitions))
    try:
        seconds = run.time(lambda: settled(progress, everything, True), lambda: True, args.round_timeout,
                           f"native group {group}")
    finally:
        run.finish()
        for c in consumers:
            c.close()  # a no-op for those their threads closed; else the thread is gone or stuck in a call
    return {"seconds": seconds, "generation": progress[0].generation,
            "evictions": sum(p.evictions for p in progress)}


def _native_body(consumer: Consumer, progress: Progress) -> Callable[[threading.Event], None]:
    def body(stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                try:
                    records = consumer.poll(POLL_S)
                except MemberEvicted:
                    progress.evictions += 1
                    continue
                progress.update(consumer.generation,
                                frozenset((tp.topic, tp.partition) for tp in consumer.assignment()),
                                [(m.topic, m.partition) for m in records])
        finally:
            consumer.close()
    return body


# ---------------------------------------------------------------- ZooKeeper


def zk_round(args: argparse.Namespace, zk: KazooClient, topics: list[str], group: str,
             layout: dict[str, list[tuple[int, int]]]) -> dict[str, Any]:
    consumers: list[ZkConsumer] = []
    try:
        for _ in range(args.members):
            consumers.append(ZkConsumer(zookeeper=args.zookeeper, group=group, autocommit_enable=False,
                                        autooffset_reset="smallest",
                                        rebalance_backoff_ms=args.zk_rebalance_backoff_ms,
                                        rebalance_retries_max=args.zk_rebalance_retries))
        progress = [Progress() for _ in consumers]
        run = Round([_zk_body(c, p, topics) for c, p in zip(consumers, progress)], progress)
        everything = frozenset((t, b, p) for t in topics for b, p in layout[t])
        try:
            seconds = run.time(lambda: settled(progress, everything, False),
                               lambda: owners_match(zk, group, consumers, progress, layout), args.round_timeout,
                               f"ZooKeeper group {group}")
        finally:
            run.finish()
    finally:
        _close_all(consumers)
        try:
            zk.delete(f"/consumers/{group}", recursive=True)
        except NoNodeError:
            pass  # nothing was registered
    return {"seconds": seconds, "assignment_changes": sum(p.changes for p in progress)}


def _zk_body(consumer: ZkConsumer, progress: Progress, topics: list[str]) -> Callable[[threading.Event], None]:
    def body(stop: threading.Event) -> None:
        consumer.subscribe(topics)
        while not stop.is_set():
            records = consumer.poll(POLL_S)
            progress.update(0, frozenset((k.topic, k.broker_id, k.partition) for k in consumer.assignment()),
                            [(r.topic, r.broker_id, r.partition) for r in records])
    return body


def owners_match(zk: KazooClient, group: str, consumers: Sequence[ZkConsumer], progress: Sequence[Progress],
                 layout: dict[str, list[tuple[int, int]]]) -> bool:
    """Every owner node exists, one per partition, and names the consumer that delivers the partition."""
    owner_of: dict[Hashable, str] = {}
    for consumer, p in zip(consumers, progress):
        for key in p.view()[1]:
            owner_of[key] = consumer.consumer_id
    pending = []
    for topic, partitions in layout.items():
        path = f"/consumers/{group}/owners/{topic}"
        try:
            children = set(zk.get_children(path))
        except NoNodeError:
            return False
        if children != {partition_name(b, p) for b, p in partitions}:
            return False
        pending += [((topic, b, p), zk.get_async(f"{path}/{partition_name(b, p)}")) for b, p in partitions]
    for key, result in pending:
        try:
            value = bytes(result.get()[0]).decode(errors="replace")
        except NoNodeError:
            return False
        if not value.startswith(f"{owner_of.get(key, '?')}-"):
            return False
    return True


def _close_all(consumers: Sequence[ZkConsumer]) -> None:
    """Close the consumers in parallel (one after another, each close would rebalance all the others)."""
    threads = [threading.Thread(target=c.close, daemon=True) for c in consumers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)


def zk_layout(zk: KazooClient, topics: list[str]) -> dict[str, list[tuple[int, int]]]:
    """Topic -> every (broker id, broker partition) as the 0.7 registry lists them."""
    layout: dict[str, list[tuple[int, int]]] = {}
    for topic in topics:
        path = f"/brokers/topics/{topic}"
        layout[topic] = [(int(b), p) for b in sorted(zk.get_children(path), key=int)
                         for p in range(int(zk.get(f"{path}/{b}")[0]))]
    return layout


# ---------------------------------------------------------------- the command


def run_rebalance_modes(args: argparse.Namespace) -> int:
    rid = run_id()
    zk = start_zk(args.zookeeper, args.timeout)
    native: list[dict[str, Any]] = []
    zookeeper: list[dict[str, Any]] = []
    try:
        with AdminClient(args.grpc, args.timeout, client_id=CLIENT_ID) as admin:
            topics, servers = prepare_topics(args, admin, zk)
            layout = zk_layout(zk, topics)
            for n in range(1, args.rounds + 1):
                native.append(native_round(args, admin, topics, servers, f"{args.group_prefix}-native-{rid}-{n}"))
                zookeeper.append(zk_round(args, zk, topics, f"{args.group_prefix}-zk-{rid}-{n}", layout))
                if not args.quiet:
                    info(f"  round {n}: native {native[-1]['seconds'] * 1000:,.0f} ms, "
                         f"zookeeper {zookeeper[-1]['seconds'] * 1000:,.0f} ms")
    finally:
        stop_zk(zk)
    native_s = statistics.median(r["seconds"] for r in native)
    zk_s = statistics.median(r["seconds"] for r in zookeeper)
    factor = ratio(zk_s, native_s)
    result = {"benchmark": "rebalance-modes", "members": args.members, "topics": args.topics,
              "partitions_per_topic": args.partitions, "brokers": len(servers), "rounds": args.rounds,
              "heartbeat_interval_ms": args.heartbeat_interval_ms,
              "zk_rebalance_backoff_ms": args.zk_rebalance_backoff_ms,
              "native": {"median_s": native_s, "rounds": native},
              "zookeeper": {"median_s": zk_s, "rounds": zookeeper}, "ratio_zookeeper_to_native": factor}
    report(args, result, [
        f"rill perf rebalance-modes: {args.members} consumers join one group over {args.topics} topics x "
        f"{args.partitions} partitions on {len(servers)} broker(s); until every partition is owned once and fetched",
        f"  native    median {native_s * 1000:>9,.0f} ms (rounds: "
        + ", ".join(f"{r['seconds'] * 1000:,.0f}" for r in native)
        + f" ms; heartbeat.interval.ms {args.heartbeat_interval_ms}; final generations "
        + ", ".join(str(r["generation"]) for r in native) + ")",
        f"  zookeeper median {zk_s * 1000:>9,.0f} ms (rounds: "
        + ", ".join(f"{r['seconds'] * 1000:,.0f}" for r in zookeeper)
        + f" ms; rebalance.backoff.ms {args.zk_rebalance_backoff_ms}; assignment changes seen "
        + ", ".join(str(r["assignment_changes"]) for r in zookeeper) + ")",
        f"  ratio zookeeper / native: {ratio_text(factor)}",
    ])
    return 0
