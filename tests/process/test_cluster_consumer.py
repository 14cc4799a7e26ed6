"""The native Producer and group Consumer against three real ``rill-broker`` processes on one ZooKeeper.

A topic is spread over the three brokers (two partitions on each); a group consumer
consumes it and commits half of every partition (acknowledged once the group's
``__rill_groups`` partition has it on every in-sync replica); the group's coordinator is
then killed with -9. The same consumer goes on
polling: it finds the new coordinator, registers again and re-reads every surviving
partition from exactly its committed offset, while the dead broker's partitions have
no leader and deliver nothing. When the dead broker comes back (same id, data
directory and ports), its partitions are consumed from their committed offsets too and
nothing produced is lost (docs/groups.md, "Groups in a cluster"; docs/cluster.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from rill.client.grpc_client import AdminClient
from rill.client.cli.main import main as cli_main
from rill.client.consumer import CommitFailed, Consumer, MemberEvicted, Message
from rill.client.errors import RillError
from rill.client.producer import Producer
from rill.client.protocol import requests as rq
from rill.client.simple import SimpleConsumer
from tests.process.broker_process import BrokerProcess

TOPIC = "t"
BROKERS = (1, 2, 3)
PER_BROKER = 2                      # partitions of the topic on each broker
PARTITIONS = PER_BROKER * len(BROKERS)
PER_PARTITION = 20                  # messages produced to each partition before the kill
COMMITTED = 10                      # messages of each partition covered by the commit
ZK_SESSION_MS = 2000                # the brokers' zookeeper.session.timeout.ms
CONSUMER_SESSION_MS = 2000          # the group's session.timeout.ms


class Cluster:
    """Three ``rill-broker`` processes on one ZooKeeper chroot; each is stopped by its PID."""

    def __init__(self, tmp_path: Path, zk_connect: str) -> None:
        self.tmp_path = tmp_path
        self.zk_connect = zk_connect
        self.procs: dict[int, BrokerProcess] = {}

    def args(self, broker_id: int) -> list[str]:
        return ["--zookeeper", self.zk_connect, "--broker-id", str(broker_id),
                "--set", "advertised.host.name=127.0.0.1",
                "--set", f"zookeeper.session.timeout.ms={ZK_SESSION_MS}",
                "--set", "group.min.session.timeout.ms=1000"]

    def start_all(self) -> None:
        procs = {i: BrokerProcess(self.tmp_path / f"data-{i}", *self.args(i)) for i in BROKERS}
        self.procs.update(procs)
        with ThreadPoolExecutor(len(procs)) as pool:  # three Python start-ups at once
            for future in [pool.submit(p.start) for p in procs.values()]:
                future.result()

    def restart(self, broker_id: int) -> BrokerProcess:
        """Start ``broker_id`` again with its data directory and its previous ports."""
        old = self.procs[broker_id]
        proc = BrokerProcess(old.data_dir, *self.args(broker_id), "--port", str(old.port),
                             "--grpc-port", str(old.grpc_port))
        self.procs[broker_id] = proc
        return proc.start()

    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p.port}" for p in self.procs.values())

    def alive(self) -> list[int]:
        return [i for i, p in self.procs.items() if p.proc is not None and p.proc.poll() is None]

    def metadata(self, broker_id: int) -> rq.TopicMetadata:
        with SimpleConsumer("127.0.0.1", self.procs[broker_id].port, timeout=5) as c:
            return c.metadata([TOPIC]).topics[0]

    def admin(self, broker_id: int) -> AdminClient:
        return AdminClient(f"127.0.0.1:{self.procs[broker_id].grpc_port}", timeout=5)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.proc is not None and proc.proc.poll() is None:
                proc.terminate()


def eventually(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (RillError, NoNodeError, OSError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture
def cluster(tmp_path: Path, zk_connect: str) -> Iterator[Cluster]:
    c = Cluster(tmp_path, zk_connect)
    try:
        c.start_all()
        yield c
    finally:
        c.stop()


def new_consumer(cluster: Cluster, group: str) -> Consumer:
    return Consumer(bootstrap_servers=cluster.bootstrap(), group_id=group, enable_auto_commit=False,
                    auto_offset_reset="earliest", session_timeout_ms=CONSUMER_SESSION_MS, heartbeat_interval_ms=300,
                    request_timeout_ms=3000, fetch_max_wait_ms=200, metadata_max_age_ms=1000)


def poll_until(consumer: Consumer, got: list[Message], done: Callable[[], bool], timeout: float,
               what: str) -> int:
    """Poll into ``got`` until ``done()``; returns how many times poll() raised MemberEvicted."""
    evictions = 0
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; got {len(got)} messages: "
                                 f"{sorted((m.partition, m.value) for m in got)}")
        try:
            got.extend(consumer.poll(0.2))
        except MemberEvicted:
            evictions += 1
    return evictions


def values(got: list[Message], partition: int) -> list[bytes]:
    return [m.value for m in got if m.partition == partition]


def payload(p: int, n: int) -> bytes:
    return f"p{p}-{n:02d}".encode()


class Scenario:
    """The shared first half: spread topic, produce, consume all, commit half, kill -9 the coordinator."""

    def __init__(self, cluster: Cluster, zk: KazooClient, group: str) -> None:
        self.cluster = cluster
        self.zk = zk
        self.group = group
        self.sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        self.committed: dict[int, int] = {}
        self.coordinator = 0
        self.dead: set[int] = set()
        self.consumer: Consumer | None = None

    def create_topic(self) -> None:
        for i in BROKERS:  # each broker holds its own partitions of the topic
            with self.cluster.admin(i) as admin:
                assert admin.create_topic(TOPIC, PER_BROKER).error_code == 0
        for i in BROKERS:
            eventually(lambda i=i: self.cluster.metadata(i).partitions == PARTITIONS, 15,  # type: ignore[misc]
                       f"{PARTITIONS} partitions at broker {i}")
        # every broker's partitions led by it, as broker 1 sees them (its registry and topic watches fire apart)
        eventually(lambda: sorted(self.cluster.metadata(1).leaders) == sorted(BROKERS * PER_BROKER), 15,
                   "each partition's leader known at broker 1")

    def produce(self, counts: dict[int, int], first: int = 0) -> None:
        with Producer(bootstrap_servers=self.cluster.bootstrap(), linger_ms=1) as producer:
            responses = [(p, payload(p, n), producer.send(TOPIC, payload(p, n), partition=p))
                         for p, count in counts.items() for n in range(first, first + count)]
            for p, value, response in responses:
                assert response.get_error(timeout=10) is None, (p, value)
                self.sent[p].append(value)

    def consume_all_and_commit_half(self) -> None:
        self.consumer = consumer = new_consumer(self.cluster, self.group)
        consumer.subscribe([TOPIC])
        got: list[Message] = []
        poll_until(consumer, got, lambda: len(got) >= PARTITIONS * PER_PARTITION, 20, "every message")
        by_partition = {p: [m for m in got if m.partition == p] for p in range(PARTITIONS)}
        assert {p: [m.value for m in ms] for p, ms in by_partition.items()} == self.sent
        self.committed = {p: ms[COMMITTED - 1].next_offset for p, ms in by_partition.items()}
        consumer.commit(offsets={(TOPIC, p): o for p, o in self.committed.items()})

    def kill_coordinator(self) -> None:
        with self.cluster.admin(1) as admin:
            info = admin.list_groups([self.group]).groups_info[0]
        self.coordinator = info.controller_broker.broker_id
        assert self.coordinator in BROKERS
        leaders = self.cluster.metadata(1).leaders
        self.dead = {p for p, leader in enumerate(leaders) if leader == self.coordinator}
        assert len(self.dead) == PER_BROKER
        self.cluster.procs[self.coordinator].kill9()

    def survivors(self) -> list[int]:
        return [i for i in BROKERS if i != self.coordinator]

    def resume_on_survivors(self, after: list[Message]) -> None:
        """Poll until every surviving partition was read again from its committed offset to its end."""
        assert self.consumer is not None
        live = [p for p in range(PARTITIONS) if p not in self.dead]
        survivor = self.survivors()[0]
        generation = self.consumer.generation
        eventually(lambda: all(self.cluster.metadata(survivor).leaders[p] == rq.NO_LEADER for p in self.dead), 15,
                   "the dead broker's partitions to lose their leader")

        def caught_up() -> bool:
            return all(set(self.sent[p][COMMITTED:]) <= set(values(after, p)) for p in live)
        poll_until(self.consumer, after, caught_up, 25, "the surviving partitions from their committed offsets")
        with self.cluster.admin(survivor) as admin:
            info = admin.list_groups([self.group]).groups_info[0]
        assert info.controller_broker.broker_id in self.survivors()
        assert self.consumer.generation > generation  # registered again with the new coordinator
        for p in live:
            offsets = [m.offset for m in after if m.partition == p]
            assert min(offsets) == self.committed[p], p  # nothing committed is read again, nothing skipped


@pytest.mark.slow
def test_group_resumes_surviving_partitions_after_coordinator_kill_9(cluster: Cluster, zk: KazooClient,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """After the coordinator's kill -9, the consumer reads the survivors' partitions on from its commits, not the dead's."""
    started = time.monotonic()
    s = Scenario(cluster, zk, "resume-survivors")
    s.create_topic()
    s.produce({p: PER_PARTITION for p in range(PARTITIONS)})
    with cluster.admin(1) as admin:  # other brokers' partitions described too, sizes included
        described = admin.describe_topics([TOPIC]).topics[0].partitions
    assert [(d.leader, d.size_bytes > 0, d.size_bytes == d.end_offset - d.start_offset) for d in described] == \
        [(leader, True, True) for leader in cluster.metadata(1).leaders]
    s.consume_all_and_commit_half()
    assert s.consumer is not None
    try:
        for i in BROKERS:  # `rill groups describe` at any broker follows it to the group's coordinator
            assert cli_main(["groups", "describe", s.group, "--grpc", f"127.0.0.1:{cluster.procs[i].grpc_port}"]) == 0
        described = capsys.readouterr().out
        s.kill_coordinator()
        assert described.count(f"coordinator broker {s.coordinator}\n") == len(BROKERS), described
        after: list[Message] = []
        s.resume_on_survivors(after)
        # meanwhile the dead broker's partitions deliver nothing and still have no leader
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            after.extend(s.consumer.poll(0.2))
        assert not [m for m in after if m.partition in s.dead]
        assert all(cluster.metadata(i).leaders[p] == rq.NO_LEADER for i in s.survivors() for p in s.dead)
        assert s.consumer.assignment(), "the consumer is a member of the group again"
    finally:
        s.consumer.close()
    assert time.monotonic() - started < 40


@pytest.mark.slow
def test_dead_broker_returns_and_nothing_is_lost(cluster: Cluster, zk: KazooClient) -> None:
    """The killed broker restarted with its id and data: its partitions resume from their commits; nothing is lost."""
    started = time.monotonic()
    s = Scenario(cluster, zk, "resume-returning")
    s.create_topic()
    s.produce({p: PER_PARTITION for p in range(PARTITIONS)})
    s.consume_all_and_commit_half()
    consumer = s.consumer
    assert consumer is not None
    try:
        s.kill_coordinator()
        after: list[Message] = []
        s.resume_on_survivors(after)
        live = [p for p in range(PARTITIONS) if p not in s.dead]

        # producers go on with the live partitions while the broker is down
        with Producer(bootstrap_servers=cluster.bootstrap(), linger_ms=1) as producer:
            outage = [producer.send(TOPIC, f"outage-{n}".encode()) for n in range(30)]
            for n, r in enumerate(outage):
                assert r.get_error(timeout=10) is None
                assert r.partition in live, r
                assert r.partition is not None
                s.sent[r.partition].append(f"outage-{n}".encode())
        poll_until(consumer, after, lambda: all(set(s.sent[p][COMMITTED:]) <= set(values(after, p)) for p in live), 15,
                   "the messages produced during the outage")
        assert not [m for m in after if m.partition in s.dead]

        # commit the survivors' progress; the group's coordinator then moves back when the broker returns
        commit_deadline = time.monotonic() + 15
        while True:
            try:
                consumer.commit()
                break
            except CommitFailed:
                assert time.monotonic() < commit_deadline, "commit during the outage"
                after.extend(consumer.poll(0.5))
        progress = {p: consumer.committed((TOPIC, p)) for p in live}
        assert all(progress[p] == max(m.next_offset for m in after if m.partition == p) for p in live), progress

        mark = len(after)
        cluster.restart(s.coordinator)
        s.produce({p: 1 for p in range(PARTITIONS)}, first=PER_PARTITION)  # one more message everywhere
        poll_until(consumer, after, lambda: all(set(s.sent[p][COMMITTED:]) <= set(values(after, p))
                                                for p in range(PARTITIONS)), 25,
                   "every partition, the returned broker's too, to its end")
        returned = after[mark:]
        for p in s.dead:  # the returned broker's partitions start at their commits
            assert min(m.offset for m in returned if m.partition == p) == s.committed[p], p
        for p in live:  # the survivors' commits made during the outage were not lost by the moves
            assert min(m.offset for m in returned if m.partition == p) >= (progress[p] or 0), p
        seen = {(m.partition, m.value) for m in after} | {
            (p, v) for p in range(PARTITIONS) for v in s.sent[p][:COMMITTED]}  # consumed before the commit
        assert {(p, v) for p in range(PARTITIONS) for v in s.sent[p]} <= seen  # none lost
        assert sorted(cluster.metadata(s.coordinator).leaders) == sorted(BROKERS * PER_BROKER)
    finally:
        consumer.close()
    assert time.monotonic() - started < 40
