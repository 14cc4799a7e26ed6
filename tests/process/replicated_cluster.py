"""Three real ``rill-broker`` processes on a real ZooKeeper, an acks=all workload, and the final check.

Shared by the replication fault tests (test_replication_faults.py: kills, pauses,
restarts) and the network-partition tests (test_network_partitions.py, whose
``NetCluster`` runs the same brokers each in a network namespace):

- :class:`Cluster` starts brokers 1-3 on one ZooKeeper chroot, creates the topic of
  replication factor 3, reads partition states from ZooKeeper, and signals brokers by
  their PIDs only. ``host``/``address``/``process`` are where a subclass puts the brokers.
- :class:`Workload`: producer threads (one per partition, each sending unique values one
  at a time with SimpleProducer to the leader named in ZooKeeper, or pinned to one
  broker) and a poll() consumer, all recording into a
  :class:`~tests.process.replication_checker.History`.
- :func:`heal_and_check` waits until the cluster has healed (every partition led, its
  ISR whole, the replicas byte-identical), reads the final logs from the leaders and
  runs the checker.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from rill.broker.cluster.replicated_topics import create_topic
from rill.client.consumer import Consumer
from rill.client.errors import BrokerError, NotEnoughReplicas, NotLeaderForPartition, RillError
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

    def host(self, broker_id: int) -> str:
        """The address ``broker_id`` listens on (and advertises)."""
        return "127.0.0.1"

    def address(self, broker_id: int) -> tuple[str, int]:
        return self.host(broker_id), self.port(broker_id)

    def process(self, broker_id: int, data_dir: Path, *extra: str) -> BrokerProcess:
        """A broker process for ``broker_id`` (not started yet)."""
        return BrokerProcess(data_dir, *self.args(broker_id), *extra)

    def start_all(self) -> None:
        procs = {i: self.process(i, self.tmp_path / f"data-{i}") for i in BROKERS}
        self.procs.update(procs)
        with ThreadPoolExecutor(len(procs)) as pool:
            for future in [pool.submit(p.start) for p in procs.values()]:
                future.result()

    def restart(self, broker_id: int) -> None:
        """Start ``broker_id`` again on its data directory and its previous ports."""
        old = self.procs[broker_id]
        proc = self.process(broker_id, old.data_dir, "--port", str(old.port), "--grpc-port", str(old.grpc_port))
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
        return ",".join(f"{self.host(b)}:{p.port}" for b, p in self.procs.items())

    def stop(self) -> None:
        for broker_id, proc in self.procs.items():
            if broker_id in self.paused and self.alive(broker_id):
                self.resume(broker_id)
            if proc.proc is not None and proc.proc.poll() is None:
                try:
                    proc.terminate(timeout=20)
                except Exception:
                    proc.kill9()

    def failure_sections(self) -> list[tuple[str, str]]:
        """Each broker's state and log tail, attached to a failing test's report (tests/conftest.py)."""
        return [(f"broker {b} {p.status()}: log {p.log_path}", p.log_tail()) for b, p in self.procs.items()]

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
        with SimpleConsumer(*self.address(broker_id), timeout=5) as consumer:
            return consumer.metadata([topic]).topics[0].leaders

    # -- the replicas' files ----------------------------------------------------------------------

    def segment_bytes(self, broker_id: int, partition: int, topic: str = TOPIC) -> bytes:
        directory = self.procs[broker_id].data_dir / f"{topic}-{partition}"
        names = sorted((n for n in os.listdir(directory) if n.endswith(".log") and n[:-4].isdigit()),
                       key=lambda n: int(n[:-4]))
        return b"".join((directory / n).read_bytes() for n in names)


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
            self._spawn(self._consume, "consumer")
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
                        *self.cluster.address(leader), acks=rq.Acks.ALL, timeout=SEND_TIMEOUT_S)
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
                    producers.pop(leader).close()  # the next send reconnects, to the address known then
                    if pinned is None:
                        leader = -1
                    time.sleep(0.05)
        finally:
            for producer in producers.values():
                producer.close()

    def _consume(self, name: str, bootstrap: str | None = None, partitions: Sequence[int] | None = None) -> None:
        """Poll ``partitions`` (all) from the start, bootstrapping from ``bootstrap`` (every broker)."""
        consumer = Consumer(bootstrap_servers=bootstrap or self.cluster.bootstrap(), auto_offset_reset="earliest",
                            enable_auto_commit=False, fetch_max_wait_ms=200, request_timeout_ms=3000,
                            metadata_max_age_ms=1000, retry_backoff_ms=100)
        try:
            for p in range(self.partitions) if partitions is None else partitions:
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
        finals[p] = read_final_log(*cluster.address(leader), topic, p)
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
