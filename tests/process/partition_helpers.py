"""Helpers of the network-partition tests: a timeline of what happened, history queries, a sampler of OFFSETS
"latest", the flapping schedule, and the workaround for a broker that missed the controller's word.

Times are ``time.monotonic()`` of the test process; broker log events are converted with :func:`monotonic`.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable

from rill.client.errors import RillError
from rill.client.protocol import requests as rq
from rill.client.simple import SimpleConsumer, SimpleProducer
from tests.process.net_cluster import NetCluster, event_time
from tests.process.replicated_cluster import PARTITIONS, TOPIC
from tests.process.replication_checker import History, Send

__all__ = ["LatestSampler", "Timeline", "first", "flap", "led_by", "monotonic", "produce_once",
           "sends", "tally"]


class Timeline:
    """Moments of a scenario, printed in seconds from its first mark (the cut)."""

    def __init__(self) -> None:
        self.marks: list[tuple[str, float]] = []

    def mark(self, what: str, at: float | None = None) -> float:
        at = time.monotonic() if at is None else at
        self.marks.append((what, at))
        return at

    def show(self) -> None:
        start = self.marks[0][1]
        print("\ntimeline (s from the cut):")
        for what, at in sorted(self.marks, key=lambda m: m[1]):
            print(f"  {at - start:7.2f}  {what}")


def monotonic(event: dict[str, object]) -> float:
    """A broker log event's time on this process's monotonic clock."""
    return event_time(event) - (time.time() - time.monotonic())


def sends(history: History, keep: Callable[[Send], bool]) -> list[Send]:
    with history._lock:
        return [s for s in history.sends if keep(s)]


def first(found: Iterable[Send]) -> float | None:
    return min((s.at for s in found), default=None)


def tally(found: Iterable[Send]) -> str:
    counts = Counter(f"{s.outcome}{'/' + s.error.split(':')[0] if s.error else ''}" for s in found)
    return ", ".join(f"{k}={v}" for k, v in sorted(counts.items())) or "none"


def led_by(cluster: NetCluster, controller: bool) -> int:
    """A partition led by the controller (``controller``) or by another broker."""
    ours = cluster.controller()
    return next(p for p in range(PARTITIONS) if (cluster.leader(p) == ours) == controller)


class LatestSampler:
    """Samples OFFSETS "latest" of every partition from the leader ZooKeeper names, from the root namespace."""

    def __init__(self, cluster: NetCluster) -> None:
        self.cluster = cluster
        self.samples: list[tuple[float, int, int, int]] = []  # (time, partition, leader, latest)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="latest-sampler")

    def __enter__(self) -> LatestSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(10)

    def _run(self) -> None:
        while not self.stopping.wait(0.05):
            for p in range(PARTITIONS):
                try:
                    leader = self.cluster.leader(p)
                    with SimpleConsumer(*self.cluster.address(leader), timeout=0.5) as consumer:
                        self.samples.append((time.monotonic(), p, leader, consumer.latest_offset(TOPIC, p)))
                except Exception:  # a leader moving or out of reach: no sample this time
                    continue

    def regressions(self) -> list[tuple[int, int, int, int, int]]:
        """(partition, leader before, latest before, leader now, latest now) wherever "latest" went down."""
        out = []
        highest: dict[int, tuple[int, int]] = {}
        for _, p, leader, latest in self.samples:
            before = highest.get(p)
            if before is not None and latest < before[1]:
                out.append((p, before[0], before[1], leader, latest))
            if before is None or latest >= before[1]:
                highest[p] = (leader, latest)
        return out


def flap(cluster: NetCluster, rng: random.Random, links: Callable[[], list[tuple[str, str]]], seconds: float,
         down: tuple[float, float], cuts: Counter[str]) -> None:
    """Until ``seconds`` pass: cut the links ``links()`` names (each one way or both, at random) for ``down`` seconds
    (uniform between the two), then heal them for 0.1-0.4 s."""
    end = time.monotonic() + seconds
    for _ in range(1000):  # bounded; ends by time
        if time.monotonic() >= end:
            return
        for a, b in links():
            if rng.random() < 0.5:
                cluster.lab.cut_both(a, b)
                cuts[f"{a}<->{b}"] += 1
            else:
                cluster.lab.cut(a, b)
                cuts[f"{a}->{b}"] += 1
        time.sleep(rng.uniform(*down))
        cluster.lab.heal_all()
        time.sleep(rng.uniform(0.1, 0.4))


def produce_once(cluster: NetCluster, partition: int) -> bool:
    """One acks=all send to ``partition``'s leader as ZooKeeper names it (from the root namespace): acknowledged?"""
    try:
        with SimpleProducer(*cluster.address(cluster.leader(partition)), acks=rq.Acks.ALL, timeout=2.0) as producer:
            producer.send(TOPIC, [b"probe"], partition)
            return True
    except (RillError, OSError):
        return False
