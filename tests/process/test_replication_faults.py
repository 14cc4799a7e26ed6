"""Fault tests for replication (issue 13, section 2): three real ``rill-broker`` processes on a real ZooKeeper.

A topic of replication factor 3 is written with ``acks=all`` by producer threads (one
per partition, each sending unique values one at a time with SimpleProducer to the
leader named in ZooKeeper, or the native Producer with retries) while a poll() consumer
reads it; brokers are killed with -9, paused with SIGSTOP, or stopped with SIGTERM and
started again. When the cluster has healed (every partition led, its ISR whole, the
replicas byte-identical) the final logs are read from the leaders and
tests/process/replication_checker.py decides: nothing acknowledged lost or moved, no
phantom read, no unexplained duplicate, per-thread order kept.

The slow tier (``-m slow``) runs a seeded campaign of 20+ leader kills, and one run with
``unclean.leader.election.enable=true`` whose losses are printed, not failed.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from rill.broker.cluster.replicated_topics import create_topic
from rill.client.consumer import Consumer
from rill.client.errors import BrokerError, NotEnoughReplicas, NotLeaderForPartition, RillError
from rill.client.producer import Producer
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import encode_message
from rill.client.simple import SimpleConsumer, SimpleProducer
from rill.client.zookeeper.replica_layout import CONTROLLER_PATH, ControllerInfo, PartitionState, state_path
from tests.process.broker_process import BrokerProcess
from tests.process.replication_checker import FAIL, INFO, OK, History, Verdict, check, read_final_log

BROKERS = (1, 2, 3)
TOPIC = "faults"
PARTITIONS = 3
SESSION_MS = 4000
SETTINGS = {
    "advertised.host.name": "127.0.0.1",
    "zookeeper.session.timeout.ms": SESSION_MS,
    "replica.lag.time.max.ms": 3000,
    "replica.fetch.wait.max.ms": 200,
    "replica.fetch.backoff.ms": 200,
    "controlled.shutdown.retry.backoff.ms": 200,
    "min.insync.replicas": 2,
}
SEND_TIMEOUT_S = 4.0  # SimpleProducer's socket timeout and the broker's ack wait


def eventually(check: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (RillError, NoNodeError, OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


class Cluster:
    """Three ``rill-broker`` processes on one ZooKeeper chroot; each is signalled by its PID only."""

    def __init__(self, tmp_path: Path, zk_connect: str, zk: KazooClient, **overrides: object) -> None:
        self.tmp_path = tmp_path
        self.zk_connect = zk_connect
        self.zk = zk
        self.settings = {**SETTINGS, **overrides}
        self.procs: dict[int, BrokerProcess] = {}
        self.paused: set[int] = set()

    def args(self, broker_id: int) -> list[str]:
        out = ["--zookeeper", self.zk_connect, "--broker-id", str(broker_id)]
        for key, value in self.settings.items():
            out += ["--set", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
        return out

    def start_all(self) -> None:
        procs = {i: BrokerProcess(self.tmp_path / f"data-{i}", *self.args(i)) for i in BROKERS}
        self.procs.update(procs)
        with ThreadPoolExecutor(len(procs)) as pool:
            for future in [pool.submit(p.start) for p in procs.values()]:
                future.result()

    def restart(self, broker_id: int) -> None:
        """Start ``broker_id`` again on its data directory and its previous ports."""
        old = self.procs[broker_id]
        proc = BrokerProcess(old.data_dir, *self.args(broker_id), "--port", str(old.port),
                             "--grpc-port", str(old.grpc_port))
        self.procs[broker_id] = proc
        proc.start(timeout=60)

    def kill9(self, broker_id: int) -> None:
        self.procs[broker_id].kill9()

    def pause(self, broker_id: int) -> None:
        os.kill(self.pid(broker_id), signal.SIGSTOP)
        self.paused.add(broker_id)

    def resume(self, broker_id: int) -> None:
        os.kill(self.pid(broker_id), signal.SIGCONT)
        self.paused.discard(broker_id)

    def pid(self, broker_id: int) -> int:
        proc = self.procs[broker_id].proc
        assert proc is not None
        return proc.pid

    def port(self, broker_id: int) -> int:
        return self.procs[broker_id].port

    def alive(self, broker_id: int) -> bool:
        proc = self.procs[broker_id].proc
        return proc is not None and proc.poll() is None

    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p.port}" for p in self.procs.values())

    def stop(self) -> None:
        for broker_id, proc in self.procs.items():
            if broker_id in self.paused and self.alive(broker_id):
                self.resume(broker_id)
            if proc.proc is not None and proc.proc.poll() is None:
                try:
                    proc.terminate(timeout=20)
                except Exception:
                    proc.kill9()

    # -- ZooKeeper --------------------------------------------------------------------------------

    def state(self, partition: int, topic: str = TOPIC) -> PartitionState:
        return PartitionState.decode(self.zk.get(state_path(topic, partition))[0])

    def leader(self, partition: int, topic: str = TOPIC) -> int:
        return self.state(partition, topic).leader

    def controller(self) -> int:
        return ControllerInfo.decode(self.zk.get(CONTROLLER_PATH)[0]).broker_id

    def healthy(self, topic: str = TOPIC, partitions: int = PARTITIONS) -> bool:
        """Every partition led and its ISR holding all three replicas (nothing under-replicated)."""
        states = [self.state(p, topic) for p in range(partitions)]
        return all(s.leader != -1 and len(s.isr) == len(BROKERS) for s in states)

    def create(self, topic: str = TOPIC, partitions: int = PARTITIONS) -> None:
        create_topic(self.zk, topic, partitions, 3, None, list(BROKERS), rng=random.Random(7))
        eventually(lambda: self.healthy(topic, partitions), 30, "a leader and a full ISR for every partition")
        # ZooKeeper holds the states from the start: wait until every broker has applied them
        # (a produce reaching a broker before its LeaderAndIsr would auto-create a 0.7 topic)
        eventually(lambda: all(self.metadata_leaders(b, topic) == tuple(self.leader(p, topic) for p in range(partitions))
                               for b in BROKERS), 30, "every broker's metadata naming the leaders")

    def metadata_leaders(self, broker_id: int, topic: str = TOPIC) -> tuple[int, ...]:
        with SimpleConsumer("127.0.0.1", self.port(broker_id), timeout=5) as consumer:
            return consumer.metadata([topic]).topics[0].leaders

    # -- the replicas' files ----------------------------------------------------------------------

    def segment_bytes(self, broker_id: int, partition: int, topic: str = TOPIC) -> bytes:
        directory = self.procs[broker_id].data_dir / f"{topic}-{partition}"
        names = sorted((n for n in os.listdir(directory) if n.endswith(".log") and n[:-4].isdigit()),
                       key=lambda n: int(n[:-4]))
        return b"".join((directory / n).read_bytes() for n in names)


@pytest.fixture
def make_cluster(tmp_path: Path, zk_connect: str, zk: KazooClient) -> Iterator[Callable[..., Cluster]]:
    made: list[Cluster] = []

    def make(**overrides: object) -> Cluster:
        cluster = Cluster(tmp_path, zk_connect, zk, **overrides)
        made.append(cluster)
        cluster.start_all()
        cluster.create()
        return cluster

    try:
        yield make
    finally:
        for cluster in made:
            cluster.stop()


class Workload:
    """Producer threads (acks=all, one unique value per send) and a poll() consumer, all recording into a History.

    ``pinned`` maps a thread name to a broker id: that thread sends to that broker whatever
    ZooKeeper says (a client with stale metadata, to catch a zombie leader acknowledging).
    """

    def __init__(self, cluster: Cluster, history: History, *, topic: str = TOPIC, partitions: int = PARTITIONS,
                 batch: int = 1, pad: int = 0, consume: bool = True) -> None:
        self.cluster = cluster
        self.history = history
        self.topic = topic
        self.partitions = partitions
        self.batch = batch
        self.pad = b"." * pad  # appended to every value (a unique prefix, then padding)
        self.consume = consume
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def start(self, pinned: dict[str, tuple[int, int]] | None = None) -> Workload:
        for p in range(self.partitions):
            self._spawn(self._produce, f"w{p}", p, None)
        for name, (partition, broker_id) in (pinned or {}).items():
            self._spawn(self._produce, name, partition, broker_id)
        if self.consume:
            self._spawn(self._consume)
        return self

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        def run() -> None:
            try:
                target(*args)
            except BaseException as exc:  # surfaced by stop()
                self.errors.append(exc)
        thread = threading.Thread(target=run, daemon=True, name=f"workload-{args[0] if args else 'consumer'}")
        thread.start()
        self.threads.append(thread)

    def _produce(self, name: str, partition: int, pinned: int | None) -> None:
        producers: dict[int, SimpleProducer] = {}
        seq = 0
        leader = -1
        refresh_at = 0.0
        try:
            while not self.stopping.is_set():
                if pinned is not None:
                    leader = pinned
                elif leader == -1 or time.monotonic() >= refresh_at:
                    try:
                        leader = self.cluster.leader(partition, self.topic)
                    except (NoNodeError, ValueError):
                        leader = -1
                    refresh_at = time.monotonic() + 0.5
                if leader == -1:
                    time.sleep(0.05)
                    continue
                producer = producers.get(leader)
                if producer is None:
                    producer = producers[leader] = SimpleProducer(
                        "127.0.0.1", self.cluster.port(leader), acks=rq.Acks.ALL, timeout=SEND_TIMEOUT_S)
                values = [f"{name}:{seq + i}".encode() + self.pad for i in range(self.batch)]
                outcome, error, first, started = OK, "", 0, time.monotonic()
                try:
                    first = producer.send(self.topic, values, partition).first_offset
                except (NotEnoughReplicas, NotLeaderForPartition) as exc:
                    outcome, error = FAIL, type(exc).__name__
                except (BrokerError, RillError, OSError) as exc:
                    outcome, error = INFO, f"{type(exc).__name__}: {exc}"
                offset = first
                for i, value in enumerate(values):
                    self.history.send(value, name, seq + i, partition, outcome, error=error, broker=leader,
                                      offset=offset if outcome == OK else None, started=started)
                    offset += len(encode_message(value))
                seq += len(values)
                if outcome != OK:
                    producer.close()
                    if pinned is None:
                        leader = -1
                    time.sleep(0.05)
        finally:
            for producer in producers.values():
                producer.close()

    def _consume(self) -> None:
        consumer = Consumer(bootstrap_servers=self.cluster.bootstrap(), auto_offset_reset="earliest",
                            enable_auto_commit=False, fetch_max_wait_ms=200, request_timeout_ms=3000,
                            metadata_max_age_ms=1000, retry_backoff_ms=100)
        try:
            for p in range(self.partitions):
                consumer.add_topic(self.topic, p)
            while not self.stopping.is_set():
                try:
                    for m in consumer.poll(0.2):
                        self.history.read(m.partition, m.offset, m.value)
                except RillError:
                    time.sleep(0.1)
        finally:
            consumer.close()

    def acked(self, partition: int | None = None) -> int:
        with self.history._lock:
            return sum(1 for s in self.history.sends if s.outcome == OK and partition in (None, s.partition))

    def run_until(self, acked: int, timeout: float, what: str) -> None:
        """Wait (bounded) until ``acked`` more sends than now are acknowledged."""
        target = self.acked() + acked
        eventually(lambda: self.acked() >= target, timeout, f"{acked} more acknowledged sends ({what})")

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=SEND_TIMEOUT_S * 3 + 10)
        alive = [t.name for t in self.threads if t.is_alive()]
        assert not alive, f"workload threads did not stop: {alive}"
        assert not self.errors, f"workload threads failed: {self.errors!r}"


def heal_and_check(cluster: Cluster, history: History, *, topic: str = TOPIC, partitions: int = PARTITIONS,
                   identical: bool = True, timeout: float = 60) -> Verdict:
    """Wait until the cluster has healed, read every partition's final log from its leader, and run the checker."""
    eventually(lambda: cluster.healthy(topic, partitions), timeout, "every partition led with a full ISR")
    if identical:
        for p in range(partitions):
            eventually(lambda p=p: len({cluster.segment_bytes(b, p, topic) for b in BROKERS}) == 1, timeout,
                       f"the three replicas of {topic}-{p} to be byte-identical")
    finals = {}
    for p in range(partitions):
        leader = cluster.leader(p, topic)
        finals[p] = read_final_log("127.0.0.1", cluster.port(leader), topic, p)
    verdict = check(history, finals)
    print(f"\nchecker: {verdict.summary()}")
    return verdict


def busiest_partition(history: History) -> int:
    counts = [0] * PARTITIONS
    with history._lock:
        for s in history.sends:
            if s.outcome == OK:
                counts[s.partition] += 1
    return max(range(PARTITIONS), key=lambda p: counts[p])


# -- fast tier ------------------------------------------------------------------------------------

def test_kill9_of_the_busiest_leader_loses_nothing_acknowledged(make_cluster: Callable[..., Cluster]) -> None:
    """kill -9 of the leader of the busiest partition while producing, then its restart, loses nothing acknowledged."""
    cluster = make_cluster()
    history = History()
    work = Workload(cluster, history).start()
    try:
        work.run_until(300, 30, "before the kill")
        victim = cluster.leader(busiest_partition(history))
        cluster.kill9(victim)
        eventually(lambda: all(cluster.leader(p) not in (-1, victim) for p in range(PARTITIONS)), 30,
                   "new leaders for the dead broker's partitions")
        work.run_until(300, 30, "after the failover")
        cluster.restart(victim)
        work.run_until(200, 30, "after the restart")
    finally:
        work.stop()
    verdict = heal_and_check(cluster, history)
    verdict.assert_no_loss()
    assert verdict.ok > 0 and verdict.reads > 0


def test_a_paused_leader_acknowledges_nothing_after_losing_leadership(make_cluster: Callable[..., Cluster]) -> None:
    """A leader SIGSTOPped past the session timeout then SIGCONTed acknowledges nothing that is not in the final log."""
    cluster = make_cluster()
    history = History()
    partition = 0
    zombie = cluster.leader(partition)
    epoch = cluster.state(partition).leader_epoch
    stale_names = [f"stale{i}" for i in range(3)]  # clients that keep sending to the old leader
    work = Workload(cluster, history).start(pinned={name: (partition, zombie) for name in stale_names})
    try:
        work.run_until(200, 30, "before the pause")
        cluster.pause(zombie)
        paused_at = time.monotonic()
        eventually(lambda: cluster.leader(partition) not in (-1, zombie), SESSION_MS / 1000 * 4,
                   "another leader while the old one is paused")
        assert cluster.state(partition).leader_epoch > epoch
        time.sleep(max(0.0, SESSION_MS / 1000 + 2 - (time.monotonic() - paused_at)))
        work.run_until(100, 30, "while the old leader is paused")
        for i in range(3):  # new stale clients: the paused kernel accepts them; their produces wait in its socket
            stale_names.append(f"late{i}")
            work._spawn(work._produce, stale_names[-1], partition, zombie)
        time.sleep(0.5)
        cluster.resume(zombie)
        resumed_at = time.monotonic()
        work.run_until(200, 40, "after the old leader resumed")
        eventually(lambda: any(s.thread in stale_names and s.outcome == FAIL and s.at >= resumed_at
                               for s in history.sends), 20, "the old leader refusing a stale client")
    finally:
        work.stop()
    verdict = heal_and_check(cluster, history)
    stale = [s for s in history.sends if s.thread in stale_names]
    late = [s for s in stale if s.outcome == OK and s.at >= paused_at]
    print(f"stale clients: {len(stale)} sends to broker {zombie}: "
          + ", ".join(f"{o}={sum(1 for s in stale if s.outcome == o)}" for o in (OK, FAIL, INFO))
          + f"; acknowledged after the pause began: {len(late)} (each must be in the final log at its offset), "
          f"of which sent during the pause: {sum(1 for s in late if s.started >= paused_at)}")
    assert not [s for s in late if s in verdict.lost or any(m[0] is s for m in verdict.misplaced)], \
        f"the zombie acknowledged sends that are not in the final log: {verdict.summary()}"
    verdict.assert_no_loss()


def test_a_follower_far_behind_catches_up_byte_for_byte(make_cluster: Callable[..., Cluster]) -> None:
    """A follower killed while much is produced, then restarted, catches up to a byte-identical log."""
    cluster = make_cluster()
    history = History()
    follower = next(b for b in BROKERS if b != cluster.leader(0))
    cluster.kill9(follower)
    eventually(lambda: all(follower not in cluster.state(p).isr for p in range(PARTITIONS)), 30,
               "the dead follower out of every ISR")
    work = Workload(cluster, history, batch=50, pad=200).start()
    try:
        work.run_until(10_000, 60, "while the follower is down")
        behind = sum(len(cluster.segment_bytes(cluster.leader(p), p)) for p in range(PARTITIONS))
        cluster.restart(follower)
        work.run_until(2_000, 30, "while the follower catches up")
    finally:
        work.stop()
    print(f"\nthe follower was {behind} bytes behind")
    verdict = heal_and_check(cluster, history)
    verdict.assert_no_loss()
    assert behind > 1_000_000, f"the follower was only {behind} bytes behind"


def test_the_controller_killed_another_takes_over(make_cluster: Callable[..., Cluster]) -> None:
    """kill -9 of the controller: another broker becomes controller and a later leader kill is still handled."""
    cluster = make_cluster()
    history = History()
    work = Workload(cluster, history).start()
    try:
        work.run_until(200, 30, "before the controller's kill")
        controller = cluster.controller()
        cluster.kill9(controller)
        eventually(lambda: cluster.controller() != controller, 30, "a new controller")
        eventually(lambda: all(cluster.leader(p) not in (-1, controller) for p in range(PARTITIONS)), 30,
                   "the old controller's partitions led elsewhere")
        work.run_until(200, 30, "after the controller's kill")
        cluster.restart(controller)
        eventually(lambda: cluster.healthy(), 60, "the old controller back in every ISR")
        victim = next(b for b in (cluster.leader(p) for p in range(PARTITIONS)) if b != cluster.controller()) \
            if any(cluster.leader(p) != cluster.controller() for p in range(PARTITIONS)) else None
        if victim is None:  # the new controller leads everything: kill a leader that is the controller's follower
            victim = cluster.leader(0)
        cluster.kill9(victim)
        eventually(lambda: all(cluster.leader(p) not in (-1, victim) for p in range(PARTITIONS)), 30,
                   "new leaders after the later leader kill")
        work.run_until(200, 30, "after the later leader kill")
        cluster.restart(victim)
    finally:
        work.stop()
    verdict = heal_and_check(cluster, history)
    verdict.assert_no_loss()


def test_a_rolling_restart_with_sigterm_fails_no_send(make_cluster: Callable[..., Cluster]) -> None:
    """SIGTERM to every broker in turn (each back and nothing under-replicated before the next): no send fails."""
    cluster = make_cluster()
    history = History()
    stopping = threading.Event()
    failures: list[BaseException] = []

    def produce(thread: str) -> None:
        with Producer(bootstrap_servers=cluster.bootstrap(), acks="all", linger_ms=0, retries=50,
                      retry_backoff_ms=100, request_timeout_ms=10_000, metadata_max_age_ms=1000) as producer:
            seq = 0
            while not stopping.is_set():
                value = f"{thread}:{seq}".encode()
                partition = seq % PARTITIONS
                try:
                    offset = producer.send(TOPIC, value, partition=partition).get_offset(timeout=60)
                    history.send(value, thread, seq, partition, OK, offset=offset, retried=True)
                except Exception as exc:  # every error counts: the point is that there are none
                    history.send(value, thread, seq, partition, INFO, retried=True, error=repr(exc))
                    failures.append(exc)
                seq += 1

    threads = [threading.Thread(target=produce, args=(f"p{i}",), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    consumer_work = Workload(cluster, history, consume=True)
    consumer_work._spawn(consumer_work._consume)
    try:
        eventually(lambda: history.count(OK) >= 200, 30, "sends before the rolling restart")
        for broker_id in BROKERS:
            code = cluster.procs[broker_id].terminate(timeout=30)
            assert code == 0, f"broker {broker_id} exited with {code}"
            cluster.restart(broker_id)
            eventually(lambda: cluster.healthy(), 60, f"nothing under-replicated after restarting {broker_id}")
            before = history.count(OK)
            eventually(lambda: history.count(OK) >= before + 100, 30, f"sends after restarting {broker_id}")
    finally:
        stopping.set()
        for t in threads:
            t.join(timeout=90)
        consumer_work.stop()
    verdict = heal_and_check(cluster, history)
    verdict.assert_no_loss()
    assert not failures, f"{len(failures)} sends failed during the rolling restart: {failures[:5]!r}"


def test_a_send_refused_during_a_handover_was_not_written(make_cluster: Callable[..., Cluster]) -> None:
    """Sends a leader refuses with NotLeaderForPartition while SIGTERM hands its partitions over are not in the log."""
    cluster = make_cluster()
    history = History()
    work = Workload(cluster, history).start()
    try:
        work.run_until(200, 30, "before the handovers")
        for broker_id in BROKERS:
            code = cluster.procs[broker_id].terminate(timeout=30)
            assert code == 0, f"broker {broker_id} exited with {code}"
            work.run_until(100, 30, f"while broker {broker_id} is stopped")
            cluster.restart(broker_id)
            eventually(lambda: cluster.healthy(), 60, f"nothing under-replicated after restarting {broker_id}")
    finally:
        work.stop()
    verdict = heal_and_check(cluster, history)
    verdict.assert_no_loss()


# -- slow tier ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_twenty_random_leader_kills(make_cluster: Callable[..., Cluster]) -> None:
    """At least 20 kill -9 faults of leaders in a seeded random order, each followed by a restart, lose nothing."""
    seed = int(os.environ.get("RILL_FAULT_SEED", random.randrange(1 << 30)))
    print(f"\nfault seed: {seed} (RILL_FAULT_SEED={seed} repeats it)")
    rng = random.Random(seed)
    cluster = make_cluster()
    history = History()
    work = Workload(cluster, history).start()
    faults = 0
    try:
        work.run_until(100, 30, "before the first fault")
        while faults < 20:
            partition = rng.randrange(PARTITIONS)
            victim = cluster.leader(partition)
            if victim == -1:
                time.sleep(0.1)
                continue
            print(f"fault {faults + 1}: kill -9 broker {victim}, leader of {TOPIC}-{partition}")
            cluster.kill9(victim)
            faults += 1
            eventually(lambda: all(cluster.leader(p) not in (-1, victim) for p in range(PARTITIONS)), 30,
                       f"new leaders after killing {victim}")
            work.run_until(50, 30, f"after fault {faults}")
            time.sleep(rng.uniform(0, 1.0))
            cluster.restart(victim)
            eventually(lambda: cluster.healthy(), 60, f"a full ISR after restarting {victim}")
            work.run_until(50, 30, f"after restarting {victim}")
    finally:
        work.stop()
    verdict = heal_and_check(cluster, history)
    verdict.assert_no_loss()


@pytest.mark.slow
def test_unclean_election_reports_what_was_lost(make_cluster: Callable[..., Cluster]) -> None:
    """With unclean.leader.election.enable=true, electing a stale replica loses acknowledged data: report, not fail."""
    cluster = make_cluster(**{"unclean.leader.election.enable": True, "min.insync.replicas": 1})
    history = History()
    partition = 0
    work = Workload(cluster, history, partitions=1).start()
    try:
        work.run_until(100, 30, "with a full ISR")
        stale = next(b for b in BROKERS if b != cluster.leader(partition))
        cluster.kill9(stale)  # the stale replica stops here
        eventually(lambda: stale not in cluster.state(partition).isr, 30, "the stale replica out of the ISR")
        second = next(b for b in BROKERS if b not in (stale, cluster.leader(partition)))
        cluster.kill9(second)
        eventually(lambda: cluster.state(partition).isr == (cluster.leader(partition),), 30,
                   "the ISR shrunk to the leader")
        work.run_until(300, 30, "acknowledged by the leader alone")
        leader = cluster.leader(partition)
        cluster.kill9(leader)
        cluster.restart(stale)  # the only live replica: elected uncleanly
        eventually(lambda: cluster.leader(partition) == stale, 30, "the stale replica elected")
        work.run_until(100, 30, "after the unclean election")
        cluster.restart(leader)
        cluster.restart(second)
    finally:
        work.stop()
    verdict = heal_and_check(cluster, history, partitions=1)
    print(f"unclean leader election lost {len(verdict.lost)} acknowledged sends "
          f"(problems: {verdict.problems()})")
    assert verdict.ok > 0
