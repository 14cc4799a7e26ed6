"""Fault tests for replication (issue 13, section 2): three real ``rill-broker`` processes on a real ZooKeeper.

A topic of replication factor 3 is written with ``acks=all`` by producer threads (one
per partition, each sending unique values one at a time with SimpleProducer to the
leader named in ZooKeeper, or the native Producer with retries) while a poll() consumer
reads it; brokers are killed with -9, paused with SIGSTOP, or stopped with SIGTERM and
started again. When the cluster has healed (every partition led, its ISR whole, the
replicas byte-identical) the final logs are read from the leaders and
tests/process/replication_checker.py decides: nothing acknowledged lost or moved, no
phantom read, no unexplained duplicate, per-thread order kept. The cluster, the workload
and the final check are tests/process/replicated_cluster.py's.

The slow tier (``-m slow``) runs a seeded campaign of 20+ leader kills, and one run with
``unclean.leader.election.enable=true`` whose losses are printed, not failed.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from rill.client.producer import Producer
from tests.process.replicated_cluster import (BROKERS, PARTITIONS, SESSION_MS, TOPIC, Cluster, Workload,
                                              busiest_partition, eventually, heal_and_check)
from tests.process.replication_checker import FAIL, INFO, OK, History


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
    consumer_work._spawn(consumer_work._consume, "consumer")
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
    cluster = make_cluster(**{"zookeeper.session.timeout.ms": 3000})  # a shorter wait per fault: 20 of them
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
