"""Delivery guarantees with real processes: at-least-once and per-partition order under kill -9.

A real broker; 20,000 numbered messages produced over 4 partitions (number ``n`` goes
to partition ``n % 4``, so each partition holds increasing numbers 4 apart) while 3
consumer processes (tests/process/delivery_consumer.py: poll, record, then commit;
auto-commit off) share the group; consumers are killed with SIGKILL at random points
and restarted several times. Then every number must have been recorded at least once,
and within one consumer session each stretch of one partition between assignments
must be gap-free and in order (consecutive numbers 4 apart): seed 002 section 4.6's
at-least-once, in the spirit of seed 001's audit.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rill.client.simple import SimpleConsumer, SimpleProducer

from tests.process.broker_process import BrokerProcess

pytestmark = pytest.mark.slow

N = 20_000
PARTITIONS = 4
CONSUMERS = 3
KILLS = 8
SCRIPT = Path(__file__).with_name("delivery_consumer.py")


def produce(port: int, done: threading.Event, rate: float = 2500.0) -> None:
    """Numbered messages, in batches of 25 per partition, at about ``rate`` messages/s."""
    started = time.monotonic()
    with SimpleProducer("127.0.0.1", port, timeout=10) as producer:
        for first in range(0, N, 100):
            batches = {("delivery", p): [str(n).encode() for n in range(first + p, first + 100, PARTITIONS)]
                       for p in range(PARTITIONS)}
            producer.send_many(batches)
            time.sleep(max(0.0, started + (first + 100) / rate - time.monotonic()))
    done.set()


class Session:
    """One consumer process and its record file."""

    def __init__(self, index: int, port: int, workdir: Path) -> None:
        self.path = workdir / f"session-{index:02d}.txt"
        self.log = open(workdir / f"session-{index:02d}.log", "wb")
        self.proc = subprocess.Popen([sys.executable, str(SCRIPT), f"127.0.0.1:{port}", "delivery-group", "delivery",
                                      str(self.path)], stdout=self.log, stderr=subprocess.STDOUT)

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.log.close()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        self.log.close()
        return code

    def lines(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.exists() else []


def seen(sessions: list[Session]) -> set[int]:
    return {int(line.split()[2]) for s in sessions for line in s.lines() if line.startswith("M ")}


def check_order(session: Session) -> int:
    """Within each assignment of a session, each partition's numbers run gap-free, 4 apart. Returns runs checked."""
    last: dict[int, int] = {}
    runs = 0
    for line in session.lines():
        if line.startswith("A") or line == "E":
            runs += len(last)
            last = {}
            continue
        if not line.startswith("M "):
            continue
        _, partition, number, _ = line.split()
        p, n = int(partition), int(number)
        assert n % PARTITIONS == p, line
        if p in last:
            assert n == last[p] + PARTITIONS, f"{session.path.name}: partition {p} went from {last[p]} to {n}"
        last[p] = n
    return runs + len(last)


def test_kill_9_consumers_lose_nothing_and_keep_order(tmp_path: Path) -> None:
    """Every message arrives at least once and in order within a partition while consumers are killed."""
    broker = BrokerProcess(tmp_path / "data", "--set", "group.min.session.timeout.ms=500").start()
    sessions: list[Session] = []
    rng = random.Random(4)
    try:
        with SimpleConsumer("127.0.0.1", broker.port, timeout=10) as admin:
            admin.create_topic("delivery", PARTITIONS)
        produced = threading.Event()
        producer = threading.Thread(target=produce, args=(broker.port, produced), daemon=True)
        live = [Session(i, broker.port, tmp_path) for i in range(CONSUMERS)]
        sessions += live
        producer.start()
        for _ in range(KILLS):
            time.sleep(rng.uniform(0.3, 1.5))
            victim = rng.randrange(CONSUMERS)
            live[victim].kill9()
            live[victim] = Session(len(sessions), broker.port, tmp_path)
            sessions.append(live[victim])
        producer.join(timeout=60)
        assert produced.is_set(), "the producer did not finish"
        deadline = time.monotonic() + 40
        while len(seen(sessions)) < N and time.monotonic() < deadline:
            time.sleep(0.25)
        for session in live:
            assert session.stop() == 0
        missing = set(range(N)) - seen(sessions)
        assert not missing, f"{len(missing)} numbers never arrived, e.g. {sorted(missing)[:10]}"
        runs = sum(check_order(s) for s in sessions)
        records = sum(1 for s in sessions for line in s.lines() if line.startswith("M "))
        assert runs >= CONSUMERS
        print(f"delivery: {N} messages, {records} records ({records - N} redelivered) over {len(sessions)} "
              f"sessions, {KILLS} kills, {runs} ordered runs checked")
    finally:
        for session in sessions:
            if session.proc.poll() is None:
                session.kill9()
        broker.terminate()
