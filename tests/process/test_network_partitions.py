"""Network partitions (issue 14, part 3): real brokers and a real ZooKeeper, each in a network namespace.

tests/process/net_cluster.py puts ZooKeeper, brokers 1-3 and the clients in namespaces of
their own on one bridge; a link is cut by an iptables DROP rule inside the receiving
namespace, so packets vanish and calls time out (tests/process/netns.py). The workload
is the replication fault tests' (acks=all producers sending unique values, one per
partition, to the leader ZooKeeper names; clients pinned to one broker; poll()
consumers), and tests/process/replication_checker.py judges the final logs: nothing
acknowledged lost or moved, nothing read that the final log does not hold there.

Scenarios: (a) a leader (also: the controller) cut off from ZooKeeper only, and a replaced
leader that reaches ZooKeeper again before the controller can tell it; (b) a leader cut
off from its followers; (c) a minority with clients of its own; (d) flapping links
(slow); (e) the controller unable to reach the broker it elects (it learns it leads from
the controller's resend once the link heals).

Each scenario prints a timeline in seconds from the cut (and from the heal), the
figures docs/cluster.md, "When the network partitions", quotes. Needs root, iproute2
and iptables; a machine without them fails here with what to install.
"""

from __future__ import annotations

import functools
import os
import random
import time
from collections import Counter
from pathlib import Path

import pytest

from rill.broker.cluster.partition_states import read_topic
from tests.process.net_cluster import NsWorkload, net_cluster, node
from tests.process.partition_helpers import (LatestSampler, Timeline, first, flap, led_by, monotonic, produce_once,
                                             sends, tally)
from tests.process.replicated_cluster import BROKERS, PARTITIONS, TOPIC, eventually, heal_and_check
from tests.process.replication_checker import FAIL, OK, History

SESSION_S = 3.0  # NET_SETTINGS' zookeeper.session.timeout.ms
LAG_S = 2.0      # NET_SETTINGS' replica.lag.time.max.ms


# -- (a) the leader cut off from ZooKeeper, not from its clients or followers ----------------------

@pytest.mark.parametrize("controller", [False, True], ids=["a-leader", "the-controller-and-a-leader"])
def test_a_leader_cut_off_from_zookeeper_acknowledges_nothing_after_it_is_replaced(tmp_path: Path,
                                                                                   controller: bool) -> None:
    """A leader (and, the second time, the controller too) cut off from ZooKeeper only is replaced once its session
    expires, and from then on acknowledges nothing to the clients that still reach it, nor lets them read past what
    was committed."""
    with net_cluster(tmp_path) as cluster:
        partition = led_by(cluster, controller)
        old = cluster.leader(partition)
        epoch = cluster.state(partition).leader_epoch
        history = History()
        stale = [f"stale{i}" for i in range(3)]  # clients that keep sending to the old leader
        work = NsWorkload(cluster, history).start(pinned={name: (partition, old) for name in stale})
        work._spawn(work._consume, "stale-consumer", "%s:%d" % cluster.address(old), [partition])
        times = Timeline()
        try:
            work.run_until(200, 30, "before the cut")
            role = "controller and leader" if controller else "leader"
            cut = times.mark(f"broker {old} ({role} of {TOPIC}-{partition}) cut from ZooKeeper, both ways")
            cluster.lab.cut_both(node(old), "zk")
            eventually(lambda: cluster.leader(partition) not in (-1, old), SESSION_S * 4, "a new leader")
            elected = times.mark(f"ZooKeeper names broker {cluster.leader(partition)} leader")
            if controller:
                times.mark(f"broker {cluster.controller()} is the controller")
            assert cluster.state(partition).leader_epoch > epoch
            work.run_until(100, 30, "on the new leader")
            time.sleep(max(0.0, cut + 8 - time.monotonic()))  # the stale clients keep trying the old leader
            healed = times.mark("link healed")
            cluster.lab.heal_both(node(old), "zk")
            eventually(lambda: any(s.thread in stale and s.outcome == FAIL and s.at > healed for s in history.sends),
                       30, "the old leader refusing a stale client after the heal")
        finally:
            work.stop()
        verdict = heal_and_check(cluster, history)
        times.mark("cluster healthy again, replicas identical")
        acked = sends(history, lambda s: s.partition == partition and s.outcome == OK)
        times.mark("last acknowledgement from the old leader",
                   max((s.at for s in acked if s.broker == old), default=cut))
        first_new = first(s for s in acked if s.broker != old)
        if first_new is not None:
            times.mark("first acknowledgement from the new leader", first_new)
        refused = first(sends(history, lambda s: s.thread in stale and s.outcome == FAIL and s.at > healed))
        if refused is not None:
            times.mark("the old leader refuses a stale client (NotLeaderForPartition)", refused)
        times.show()
        zombie = sends(history, lambda s: s.thread in stale and s.started >= cut)
        print(f"stale clients after the cut: {tally(zombie)}")
        events = {name: len(cluster.events(old, name)) for name in
                  ("isr.shrinking", "isr.write_failed", "isr.update_lost", "isr.updated", "replica.truncated",
                   "zookeeper.session_lost")}
        print(f"broker {old}'s events: {events}; truncated: "
              f"{[(e.get('from_offset'), e.get('to_offset')) for e in cluster.events(old, 'replica.truncated')]}")
        late = [s for s in zombie if s.outcome == OK and s.started >= elected + 0.5]
        assert not late, f"the old leader acknowledged {len(late)} sends begun after it was replaced: {late[:3]}"
        verdict.assert_no_loss()


def test_a_replaced_leader_back_in_touch_with_zookeeper_is_fenced_by_its_isr_write(tmp_path: Path) -> None:
    """A replaced leader that reaches ZooKeeper again before the controller can tell it (the controller cannot reach
    it) tries to shrink its ISR, loses the compare-and-set to the controller's write, and acknowledges nothing."""
    with net_cluster(tmp_path) as cluster:
        partition = led_by(cluster, controller=False)
        old, controller = cluster.leader(partition), cluster.controller()
        history = History()
        stale = [f"stale{i}" for i in range(3)]
        work = NsWorkload(cluster, history).start(pinned={name: (partition, old) for name in stale})
        work._spawn(work._consume, "stale-consumer", "%s:%d" % cluster.address(old), [partition])
        times = Timeline()
        try:
            work.run_until(200, 30, "before the cut")
            cut = times.mark(f"broker {old} (leader of {TOPIC}-{partition}) cut from ZooKeeper and from "
                             f"controller {controller}, both ways")
            cluster.lab.cut_both(node(old), "zk")
            cluster.lab.cut_both(node(old), node(controller))
            eventually(lambda: cluster.leader(partition) not in (-1, old), SESSION_S * 4, "a new leader")
            elected = times.mark(f"ZooKeeper names broker {cluster.leader(partition)} leader")
            reconnected = times.mark(f"broker {old} reaches ZooKeeper again (not the controller)")
            cluster.lab.heal_both(node(old), "zk")
            eventually(lambda: any(e.get("partition") == partition for e in cluster.events(old, "isr.update_lost")),
                       LAG_S * 5, f"broker {old}'s ISR write losing its compare-and-set")
            lost = [e for e in cluster.events(old, "isr.update_lost") if e.get("partition") == partition]
            times.mark(f"broker {old}'s ISR write lost (stored leader epoch {lost[0].get('stored_leader_epoch')})",
                       monotonic(lost[0]))
            time.sleep(max(0.0, reconnected + 5 - time.monotonic()))  # the stale clients keep trying it
            times.mark("every link healed (the controller's resend tells the old leader the new epoch)")
            cluster.lab.heal_all()
            written = [e for e in cluster.events(old, "isr.updated")
                       if e.get("partition") == partition and monotonic(e) >= cut]
            eventually(lambda: cluster.healthy(), 30, "the old leader back in every ISR, as a follower")
        finally:
            work.stop()
        verdict = heal_and_check(cluster, history)
        times.show()
        zombie = sends(history, lambda s: s.thread in stale and s.started >= cut)
        print(f"stale clients after the cut: {tally(zombie)}")
        assert not written, f"broker {old} wrote its ISR after it was cut off: {written}"
        late = [s for s in zombie if s.outcome == OK and s.started >= elected + 0.5]
        assert not late, f"the old leader acknowledged {len(late)} sends begun after it was replaced: {late[:3]}"
        verdict.assert_no_loss()


# -- (b) the leader cut off from its followers, not from ZooKeeper or its clients -------------------

def test_a_leader_cut_off_from_its_followers_refuses_acks_all_with_not_enough_replicas(tmp_path: Path) -> None:
    """A leader cut off from both followers shrinks its ISR to itself after replica.lag.time.max.ms, then refuses
    acks=all with NotEnoughReplicas (min.insync.replicas=2) rather than acknowledge alone; healed, takes them back."""
    with net_cluster(tmp_path) as cluster:
        partition = 0
        leader = cluster.leader(partition)
        followers = [b for b in BROKERS if b != leader]
        history = History()
        work = NsWorkload(cluster, history).start()
        times = Timeline()
        try:
            work.run_until(200, 30, "before the cut")
            cut = times.mark(f"broker {leader} (leader of {TOPIC}-{partition}) cut from brokers {followers}, "
                             "both ways")
            for f in followers:
                cluster.lab.cut_both(node(leader), node(f))
            eventually(lambda: cluster.state(partition).isr == (leader,), LAG_S * 5, "the ISR shrunk to the leader")
            shrunk = times.mark(f"ZooKeeper holds ISR [{leader}]")
            eventually(lambda: any(s.error == "NotEnoughReplicas" and s.at > cut for s in history.sends), 20,
                       "an acks=all produce refused with NotEnoughReplicas")
            work.run_until(100, 30, "on the partitions the others lead")
            time.sleep(max(0.0, shrunk + 3 - time.monotonic()))
            healed = times.mark("links healed")
            cluster.lab.heal_all()
            eventually(lambda: len(cluster.state(partition).isr) == len(BROKERS), 30, "the followers back in the ISR")
            times.mark("ZooKeeper holds the full ISR again")
            eventually(lambda: any(s.partition == partition and s.outcome == OK and s.at > healed
                                   for s in history.sends), 30, "an acknowledged send after the heal")
        finally:
            work.stop()
        verdict = heal_and_check(cluster, history)
        mine = sends(history, lambda s: s.partition == partition)
        times.mark("last acknowledgement before the heal",
                   max((s.at for s in mine if s.outcome == OK and s.at < healed), default=cut))
        for what, keep in (("first NotEnoughReplicas", lambda s: s.error == "NotEnoughReplicas"),
                           ("first NotEnoughReplicasAfterAppend", lambda s: "AfterAppend" in s.error),
                           ("first RequestTimedOut", lambda s: "RequestTimedOut" in s.error)):
            at = first(s for s in mine if keep(s) and s.at > cut)
            if at is not None:
                times.mark(what, at)
        first_ok = first(s for s in mine if s.outcome == OK and s.at > healed)
        if first_ok is not None:
            times.mark("first acknowledgement after the heal", first_ok)
        others = sends(history, lambda s: s.partition != partition and s.outcome == OK and cut < s.at < healed)
        for e in cluster.events(leader, "isr.updated"):
            if e.get("partition") == partition:
                times.mark(f"broker {leader} wrote ISR {e.get('isr')}", monotonic(e))
        times.show()
        print(f"{TOPIC}-{partition} during the cut: {tally(s for s in mine if cut <= s.started < healed)}; "
              f"other partitions acknowledged {len(others)} sends meanwhile")
        alone = [s for s in mine if s.outcome == OK and shrunk + 0.5 <= s.started and s.at < healed]
        assert not alone, f"{len(alone)} sends acknowledged by the leader alone: {alone[:3]}"
        assert others, "the partitions led by the other brokers stopped too"
        verdict.assert_no_loss()


# -- (c) a minority partition that still has clients ------------------------------------------------

def test_a_minority_with_its_own_clients_loses_nothing_it_acknowledged(tmp_path: Path) -> None:
    """A leader partitioned with clients of its own from the other brokers, ZooKeeper and the other clients
    acknowledges nothing more to them (nothing it acknowledged is lost) and serves them only committed data."""
    with net_cluster(tmp_path, clients=("clients", "minority")) as cluster:
        partition = 0
        old = cluster.leader(partition)
        majority = [node(b) for b in BROKERS if b != old] + ["zk", "clients"]
        history = History()
        local = [f"minority{i}" for i in range(3)]
        placement = {name: "minority" for name in [*local, "minority-consumer"]}
        work = NsWorkload(cluster, history, placement=placement).start(
            pinned={name: (partition, old) for name in local})
        work._spawn(work._consume, "minority-consumer", "%s:%d" % cluster.address(old), [partition])
        times = Timeline()
        try:
            work.run_until(300, 30, "before the partition")
            cut = times.mark(f"broker {old} (leader of {TOPIC}-{partition}) and the minority's clients "
                             f"cut from {majority}, both ways")
            cluster.lab.isolate([node(old), "minority"], majority)
            eventually(lambda: cluster.leader(partition) not in (-1, old), SESSION_S * 4, "a new leader")
            times.mark(f"ZooKeeper names broker {cluster.leader(partition)} leader")
            eventually(lambda: any(s.partition == partition and s.outcome == OK and s.broker != old
                                   for s in history.sends), 30, f"an acknowledgement by the new leader")
            time.sleep(max(0.0, cut + 8 - time.monotonic()))
            healed = times.mark("partition healed")
            cluster.lab.heal_all()
            eventually(lambda: any(s.thread in local and s.outcome == FAIL and s.at > healed for s in history.sends),
                       30, "the old leader refusing the minority's clients")
        finally:
            work.stop()
        verdict = heal_and_check(cluster, history)
        times.mark("cluster healthy again, replicas identical")
        theirs = sends(history, lambda s: s.thread in local)
        times.mark("last acknowledgement to the minority",
                   max((s.at for s in theirs if s.outcome == OK), default=cut))
        first_new = first(sends(history, lambda s: s.partition == partition and s.outcome == OK and s.broker != old))
        if first_new is not None:
            times.mark("first acknowledgement to the majority from the new leader", first_new)
        refused = first(s for s in theirs if s.outcome == FAIL and s.at > healed)
        if refused is not None:
            times.mark("the old leader refuses the minority (NotLeaderForPartition)", refused)
        truncated = cluster.events(old, "replica.truncated")
        times.show()
        minority_reads = sum(1 for p, _, v in history.reads if p == partition and v.startswith(b"minority"))
        print(f"minority clients after the cut: {tally(s for s in theirs if s.started >= cut)}; "
              f"old leader truncated {[(e.get('from_offset'), e.get('to_offset')) for e in truncated]}; "
              f"reads of minority values: {minority_reads}")
        late = [s for s in theirs if s.outcome == OK and s.started >= cut + 0.5]
        assert not late, f"the minority's leader acknowledged {len(late)} sends begun after the partition: {late[:3]}"
        verdict.assert_no_loss()


# -- (d) flapping links -------------------------------------------------------------------------------

FLAP_S = 15.0


@pytest.mark.slow
def test_flapping_links_lose_nothing(tmp_path: Path) -> None:
    """Flapping links (down for 0.2-2.5 s, up for 0.1-0.4 s, over and over) between a leader and ZooKeeper, a leader
    and its followers, then random pairs of ZooKeeper, brokers and clients lose nothing acknowledged, and the cluster
    heals. Downs straddle the timeouts (session 3 s, lag 2 s, follower socket 1.5 s), so some expire and some not."""
    seed = int(os.environ.get("RILL_FAULT_SEED", random.randrange(1 << 30)))
    print(f"\nfault seed: {seed} (RILL_FAULT_SEED={seed} repeats it)")
    rng = random.Random(seed)
    with net_cluster(tmp_path) as cluster:
        names = ["zk", *(node(b) for b in BROKERS), "clients"]
        epochs = {p: cluster.state(p).leader_epoch for p in range(PARTITIONS)}
        history = History()
        work = NsWorkload(cluster, history).start()
        times = Timeline()
        cuts: Counter[str] = Counter()

        def leader_and_zk() -> list[tuple[str, str]]:
            return [(node(max(cluster.leader(0), 1)), "zk")]

        def leader_and_followers() -> list[tuple[str, str]]:
            leader = max(cluster.leader(1), 1)
            return [(node(leader), node(b)) for b in BROKERS if b != leader]

        def random_pairs() -> list[tuple[str, str]]:
            return [(a, b) for a, b in (rng.sample(names, 2) for _ in range(rng.choice((1, 2, 3))))]

        try:
            with LatestSampler(cluster) as sampler:
                work.run_until(200, 30, "before the flapping")
                start = times.mark(f"the link between {TOPIC}-0's leader and ZooKeeper flaps")
                flap(cluster, rng, leader_and_zk, FLAP_S / 3, (1.0, 2.5), cuts)
                times.mark(f"the links between {TOPIC}-1's leader and its followers flap")
                flap(cluster, rng, leader_and_followers, FLAP_S / 3, (0.5, 2.5), cuts)
                times.mark("random links flap")
                flap(cluster, rng, random_pairs, FLAP_S / 3, (0.2, 0.8), cuts)
                healed = times.mark("every link healed")
                eventually(lambda: cluster.healthy(), 30, "every partition led with a full ISR")
                times.mark("every partition led with a full ISR")
                work.run_until(200, 30, "after the flapping")
                times.mark("200 more sends acknowledged")
        finally:
            work.stop()
        verdict = heal_and_check(cluster, history)
        during = sends(history, lambda s: start <= s.started < healed)
        times.show()
        changes = {p: cluster.state(p).leader_epoch - epochs[p] for p in range(PARTITIONS)}
        print(f"{sum(cuts.values())} cuts ({len(cuts)} distinct links); leader epochs moved {changes}; "
              f"sends during the flapping: {tally(during)}")
        print(f"OFFSETS latest: {len(sampler.samples)} samples from the leaders, went down "
              f"{len(sampler.regressions())} times")
        verdict.assert_no_loss()
        assert verdict.ok > 0 and any(s.outcome == OK for s in during)
        assert not sampler.regressions(), f"OFFSETS latest went down (KIP-207): {sampler.regressions()[:5]}"


# -- (e) the controller cannot reach the broker it elects --------------------------------------------

def test_a_leader_elected_while_the_controller_cannot_reach_it_leads_once_healed(tmp_path: Path) -> None:
    """A broker elected leader while the controller cannot reach it (its LeaderAndIsr times out) learns it leads
    once the link heals, and every partition takes acks=all produces again."""
    with net_cluster(tmp_path) as cluster:
        controller = cluster.controller()
        assignment = read_topic(cluster.zk, TOPIC)
        assert assignment is not None
        choice = [(p, a, next(b for b in assignment.replicas[p] if b != a))
                  for p, a in ((p, cluster.leader(p)) for p in range(PARTITIONS)) if a != controller]
        choice = [(p, a, b) for p, a, b in choice if b != controller]
        assert choice, f"no partition whose successor is not the controller {controller}: {assignment.replicas}"
        partition, old, successor = choice[0]
        times = Timeline()
        times.mark(f"controller {controller} cut from broker {successor}; broker {old} (leader of "
                   f"{TOPIC}-{partition}) cut from ZooKeeper")
        failed = len(cluster.events(controller, "controller.send_failed"))
        cluster.lab.cut_both(node(controller), node(successor))
        cluster.lab.cut_both(node(old), "zk")
        try:
            eventually(lambda: cluster.leader(partition) == successor, SESSION_S * 4, f"broker {successor} elected")
            times.mark(f"ZooKeeper names broker {successor} leader")
            eventually(lambda: len(cluster.events(controller, "controller.send_failed")) > failed, 10,
                       f"the controller's LeaderAndIsr to broker {successor} failing")
            times.mark(f"the controller's LeaderAndIsr to broker {successor} failed")
            healed = times.mark("every link healed")
            cluster.lab.heal_all()
            for p in sorted(range(PARTITIONS), key=lambda p: p != partition):  # the elected one's first
                eventually(functools.partial(produce_once, cluster, p), 15, f"an acknowledged send to {TOPIC}-{p}")
                times.mark(f"{TOPIC}-{p} acknowledges again")
            assert time.monotonic() > healed
        finally:
            times.show()
