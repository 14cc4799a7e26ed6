"""``rill perf group-failover``: how long consumer groups stall when a group coordinator is killed, and what they lose.

On a cluster of its own (rill.client.cli.perf.cluster_setup: a ZooKeeper and ``--brokers``
brokers, so ``__rill_groups`` has its default factor, 3), a topic of ``--partitions``
partitions with factor ``--brokers`` gets ``--rate`` acks=all messages a second from a
producer process, and ``--groups`` groups of ``--members`` members consume it: real
:class:`~rill.client.consumer.Consumer` instances, as threads in ``--workers`` worker
processes (rill.client.cli.perf.group_failover_members), each polling and committing
synchronously after every poll that returned messages. Once every member has consumed
steadily for ``--settle`` seconds with no rebalance, each of ``--rounds`` rounds:

1. asks ListGroups which broker coordinates each group (the leader of the group's
   ``__rill_groups`` partition) and picks the **victim**: the broker that coordinates
   the most groups, never the controller while another broker coordinates a group;
2. ``kill -9`` of the victim; from that moment, per member, the time until it
   **consumed again** (a poll returned messages) and until a commit of it was
   **acknowledged again**; max and median over all members, and per group;
3. **commits lost**: per group, the highest acknowledged commit of each partition
   (recorded by the workers before asking) against what the group's coordinator now
   serves (FetchOffsets at the coordinator ListGroups names): a partition whose served
   offset is below it lost an acknowledged commit. The workers also report any member
   that, assigned a partition, started consuming below the group's highest acknowledged
   commit of it (a lost commit that a later one overwrote);
4. starts the victim again and waits until both topics are in sync and the groups
   settled before the next round.

The victim also leads about a third of the topic's partitions, so members owning one of
those wait for that partition's new leader too: both wait for ZooKeeper to expire the
victim's session (``zookeeper.session.timeout.ms``). The groups the victim did not
coordinate show that part alone; the report says which groups moved.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import IO, Any

from rill.client.cli.common import CliError, positive_float, positive_int
from rill.client.cli.perf.cluster_setup import add_cluster_arguments, finish, new_cluster, say
from rill.client.cli.perf.report import report
from rill.client.cli.spawned_cluster import SpawnedCluster
from rill.client.grpc_client import AdminClient, error_name
from rill.client.topic_names import GROUPS_TOPIC
from rill.v1 import coordinator_pb2 as pb

TOPIC = "group-failover"
POLL_S = 0.1
COORDINATOR_WAIT_S = 120.0


def add_parsers(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = kinds.add_parser("group-failover", help="a cluster of its own: how long consumer groups stall after kill -9 "
                                                "of their coordinator, and whether acknowledged commits survive")
    add_cluster_arguments(p)
    p.add_argument("--groups", type=positive_int, default=10, help="consumer groups (default: 10)")
    p.add_argument("--members", type=positive_int, default=8, help="members of each group (default: 8)")
    p.add_argument("--partitions", type=positive_int, default=16, help="partitions of the topic (default: 16)")
    p.add_argument("--rate", type=positive_float, default=80.0, metavar="MSG_PER_S",
                   help="acks=all messages a second produced to the topic, spread over its partitions (default: 80)")
    p.add_argument("--rounds", type=positive_int, default=3, help="kills (default: 3)")
    p.add_argument("--workers", type=positive_int, default=2,
                   help="processes the members run in as threads; a group's members share one (default: 2)")
    p.add_argument("--poll-timeout", type=positive_float, default=0.2, metavar="S",
                   help="each member's poll() timeout (default: 0.2)")
    p.add_argument("--fetch-max-wait-ms", type=positive_int, default=100, metavar="MS",
                   help="the members' fetch.max.wait.ms (default: 100)")
    p.add_argument("--session-timeout-ms", type=positive_int, default=10_000, metavar="MS",
                   help="the members' session.timeout.ms (default: 10000, the Consumer's)")
    p.add_argument("--heartbeat-interval-ms", type=positive_int, default=3000, metavar="MS",
                   help="the members' heartbeat.interval.ms (default: 3000, the Consumer's)")
    p.add_argument("--settle", type=positive_float, default=3.0, metavar="S",
                   help="before a kill, every member must have consumed within this long, with no rebalance "
                        "(default: 3)")
    p.add_argument("--timeout", type=positive_float, default=180.0, metavar="S",
                   help="give up when the members have not consumed and committed again this long after a kill, "
                        "or not settled (default: 180)")
    p.set_defaults(run=run_group_failover)


# ---------------------------------------------------------------- the workers


class Worker:
    """A worker process (rill.client.cli.perf.group_failover_members), one JSON line per command and answer."""

    def __init__(self, config: dict[str, Any], log_path: str) -> None:
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rill.client.cli.perf.group_failover_members", json.dumps(config)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)

    def ask(self, cmd: str, **fields: Any) -> dict[str, Any]:
        stdin, stdout = self._pipes()
        try:
            stdin.write(json.dumps({"cmd": cmd, **fields}) + "\n")
            stdin.flush()
            line = stdout.readline()
        except OSError as exc:
            raise CliError(f"a worker process failed ({exc}); see {self.log_path}") from None
        if not line:
            raise CliError(f"a worker process ended (exit code {self.proc.poll()}); see {self.log_path}")
        return dict(json.loads(line))

    def _pipes(self) -> tuple[IO[str], IO[str]]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        return self.proc.stdin, self.proc.stdout

    def stop(self) -> dict[str, Any]:
        answer = self.ask("stop")
        self.proc.wait(60)
        return answer

    def close(self) -> None:
        """Make sure the process is gone (by its PID: kill -9 when it still runs)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(60)


class Members:
    """The member workers together."""

    def __init__(self, workers: Sequence[Worker]) -> None:
        self.workers = list(workers)

    def gather(self, cmd: str, key: str, **fields: Any) -> list[dict[str, Any]]:
        return [row for w in self.workers for row in w.ask(cmd, **fields)[key]]

    def status(self) -> list[dict[str, Any]]:
        rows = self.gather("status", "members")
        broken = [r for r in rows if r["fatal"]]
        if broken:
            raise CliError(f"member {broken[0]['member']} of {broken[0]['group']} failed: {broken[0]['fatal']}")
        return rows

    def since(self, t: float, window: float) -> list[dict[str, Any]]:
        return self.gather("since", "members", t=t, window=window)

    def acked(self) -> dict[str, dict[int, int]]:
        out: dict[str, dict[int, int]] = {}
        for w in self.workers:
            for group, offsets in w.ask("acked")["acked"].items():
                out[group] = {int(p): int(o) for p, o in offsets.items()}
        return out


def start_workers(args: argparse.Namespace, cluster: SpawnedCluster, groups: list[str]) -> tuple[Worker, Members]:
    common = {"bootstrap": cluster.bootstrap, "topic": TOPIC}
    producer = Worker({**common, "role": "producer", "rate": args.rate, "partitions": args.partitions,
                       "message_size": args.message_size}, os.path.join(cluster.work, "producer.log"))
    shares = [groups[i::args.workers] for i in range(min(args.workers, len(groups)))]
    members = [Worker({**common, "role": "members", "groups": share, "members": args.members,
                       "poll_timeout": args.poll_timeout, "fetch_max_wait_ms": args.fetch_max_wait_ms,
                       "session_timeout_ms": args.session_timeout_ms, "heartbeat_interval_ms": args.heartbeat_interval_ms},
                      os.path.join(cluster.work, f"members-{i}.log")) for i, share in enumerate(shares)]
    return producer, Members(members)


# ---------------------------------------------------------------- the run


def run_group_failover(args: argparse.Namespace) -> int:
    if args.members > args.partitions:
        raise CliError(f"--members {args.members} is more than --partitions {args.partitions}: "
                       "some members would own nothing and never consume", 2)
    cluster = new_cluster(args)
    rid = uuid.uuid4().hex[:6]
    groups = [f"perf-gf-{rid}-{i}" for i in range(args.groups)]
    producer: Worker | None = None
    members: Members | None = None
    rounds: list[dict[str, Any]] = []
    try:
        say(args, f"starting ZooKeeper and {args.brokers} brokers under {cluster.work}")
        cluster.start()
        cluster.create_topic(TOPIC, args.partitions, args.brokers)
        cluster.wait_in_sync(GROUPS_TOPIC)
        producer, members = start_workers(args, cluster, groups)
        say(args, f"{args.groups} groups of {args.members} members joining; {args.rate:g} messages/s produced")
        settle(args, members)
        for i in range(args.rounds):
            row = one_round(args, cluster, members, groups)
            rounds.append(row)
            say(args, f"  round {i + 1}: kill -9 of broker {row['victim']} ({row['victim_groups']} groups' "
                      f"coordinator{', the controller' if row['victim_is_controller'] else ''}): all consumed again "
                      f"after {row['consumed_max_s']:.2f} s (median {row['consumed_median_s']:.2f} s), committed "
                      f"after {row['committed_max_s']:.2f} s; {row['commits_lost']} acknowledged commit(s) lost")
            cluster.brokers[row["victim"]].start()
            cluster.wait_in_sync(TOPIC)
            cluster.wait_in_sync(GROUPS_TOPIC)
            settle(args, members)
        final = [row for w in members.workers for row in w.stop()["members"]]
        starts_behind = sum(int(r["starts_behind"]) for r in final)
        produced = producer.stop()
    finally:
        for w in ([producer] if producer else []) + (members.workers if members else []):
            w.close()
        finish(args, cluster)
    result = summarize(args, rounds, final, starts_behind, produced)
    report(args, result, text_lines(args, result))
    return 0


def settle(args: argparse.Namespace, members: Members) -> None:
    """Until every member consumed within ``--settle`` s and no member was assigned anew meanwhile."""
    deadline = time.monotonic() + args.timeout
    while True:
        before = {(r["group"], r["member"]): r["assignments"] for r in members.status()}
        t = time.monotonic()
        time.sleep(args.settle)
        after = members.status()
        consumed = members.since(t, 0.0)
        if (all(r["first"] is not None for r in consumed)
                and all(before[(r["group"], r["member"])] == r["assignments"] and r["owned"] > 0 for r in after)):
            return
        if time.monotonic() > deadline:
            idle = [f"{r['group']}/{r['member']}" for r in consumed if r["first"] is None]
            raise CliError(f"the groups did not settle in {args.timeout:g} s (not consuming: {idle[:10]})")


def one_round(args: argparse.Namespace, cluster: SpawnedCluster, members: Members,
              groups: list[str]) -> dict[str, Any]:
    coordinators = group_coordinators(cluster, groups)
    controller = cluster.controller_id()
    victim, is_controller = choose_victim(coordinators, controller, [b.broker_id for b in cluster.live()
                                                                     if b.broker_id is not None])
    moved = sorted(g for g, b in coordinators.items() if b == victim)
    killed = time.monotonic()
    cluster.brokers[victim].kill9()
    rows = wait_recovered(args, members, killed)
    acked = members.acked()  # before asking the coordinators: every commit acknowledged so far must be there
    lost = lost_commits(cluster, acked, victim)
    after = group_coordinators(cluster, groups, but=victim)
    by_group: dict[str, dict[str, Any]] = {}
    for group in groups:
        mine = [r for r in rows if r["group"] == group]
        by_group[group] = {"coordinator_before": coordinators[group], "coordinator_after": after[group],
                           "moved": group in moved, **spread(mine, "consumed_s", "consumed"),
                           **spread(mine, "committed_s", "committed")}
    gaps = sorted(r["gap_before"] for r in rows if r["gap_before"] is not None)
    return {"victim": victim, "victim_is_controller": is_controller, "controller": controller,
            "victim_groups": len(moved), "coordinators": dict(collections.Counter(coordinators.values())),
            **spread(rows, "consumed_s", "consumed"), **spread(rows, "committed_s", "committed"),
            "steady_gap_median_s": statistics.median(gaps) if gaps else None,
            "groups": by_group, "commits_lost": len(lost), "lost": lost,
            "partitions_checked": sum(len(v) for v in acked.values())}


def choose_victim(coordinators: dict[str, int], controller: int, live: Iterable[int]) -> tuple[int, bool]:
    """The broker coordinating the most groups, the controller only when no other broker coordinates any."""
    counts = collections.Counter(coordinators.values())
    ranked = sorted(live, key=lambda b: (-counts.get(b, 0), b))
    for broker in ranked:
        if broker != controller and counts.get(broker, 0) > 0:
            return broker, False
    return ranked[0], ranked[0] == controller


def wait_recovered(args: argparse.Namespace, members: Members, killed: float) -> list[dict[str, Any]]:
    """Until every member consumed and had a commit acknowledged after ``killed``; per member, the times."""
    deadline = killed + args.timeout
    while True:
        rows = members.since(killed, args.settle)
        if all(r["first"] is not None and r["first_commit"] is not None for r in rows):
            return [{**r, "consumed_s": r["first"] - killed, "committed_s": r["first_commit"] - killed} for r in rows]
        if time.monotonic() > deadline:
            stuck = [f"{r['group']}/{r['member']}" for r in rows if r["first"] is None or r["first_commit"] is None]
            raise CliError(f"{len(stuck)} members had not consumed and committed {args.timeout:g} s after the kill: "
                           f"{stuck[:10]}")
        time.sleep(POLL_S)


def spread(rows: list[dict[str, Any]], key: str, name: str) -> dict[str, float]:
    values = [float(r[key]) for r in rows]
    return {f"{name}_max_s": max(values), f"{name}_median_s": statistics.median(values)}


def group_coordinators(cluster: SpawnedCluster, groups: list[str], *, but: int | None = None) -> dict[str, int]:
    """Group -> the broker id ListGroups names as its coordinator (asked of a live broker until each has one)."""
    deadline = time.monotonic() + COORDINATOR_WAIT_S
    found: dict[str, int] = {}
    while True:
        with cluster.admin(but=but) as admin:
            for info in admin.list_groups([g for g in groups if g not in found]).groups_info:
                if info.error_code == pb.NONE and info.controller_broker.grpc_port > 0:
                    found[info.group_name] = info.controller_broker.broker_id
        if len(found) == len(groups):
            return found
        if time.monotonic() > deadline:
            raise CliError(f"no coordinator named for {sorted(set(groups) - set(found))[:5]}")
        time.sleep(POLL_S)


def lost_commits(cluster: SpawnedCluster, acked: dict[str, dict[int, int]], victim: int) -> list[dict[str, Any]]:
    """Every (group, partition) whose coordinator serves an offset below the highest acknowledged commit."""
    lost = []
    for group, offsets in sorted(acked.items()):
        served = served_offsets(cluster, group, victim)
        for partition, offset in sorted(offsets.items()):
            if served.get(partition, -1) < offset:
                lost.append({"group": group, "partition": partition, "acknowledged": offset,
                             "served": served.get(partition, -1)})
    return lost


def served_offsets(cluster: SpawnedCluster, group: str, victim: int) -> dict[int, int]:
    """The group's committed offsets of TOPIC, as FetchOffsets at its coordinator answers."""
    deadline = time.monotonic() + COORDINATOR_WAIT_S
    last = ""
    while time.monotonic() < deadline:
        coordinator = group_coordinators(cluster, [group], but=victim)[group]
        broker = cluster.brokers[coordinator]
        with AdminClient(f"127.0.0.1:{broker.grpc_port}", 30.0) as admin:
            response = admin.fetch_offsets(group)
        if response.error_code == pb.NONE:
            return {o.partition: o.offset for o in response.offsets if o.topic == TOPIC}
        last = error_name(response.error_code)
        time.sleep(POLL_S)
    raise CliError(f"FetchOffsets of {group} kept failing: {last}")


# ---------------------------------------------------------------- the report


def summarize(args: argparse.Namespace, rounds: list[dict[str, Any]], final: list[dict[str, Any]],
              starts_behind: int, produced: dict[str, Any]) -> dict[str, Any]:
    failures: collections.Counter[str] = collections.Counter()
    errors: collections.Counter[str] = collections.Counter()
    for r in final:
        failures.update(r["commit_failures"])
        errors.update(r["poll_errors"])
    return {"benchmark": "group-failover", "brokers": args.brokers, "groups": args.groups, "members": args.members,
            "partitions": args.partitions, "rate": args.rate, "settings": list(args.settings), "rounds": rounds,
            "consumed_max_s_median": statistics.median(r["consumed_max_s"] for r in rounds),
            "committed_max_s_median": statistics.median(r["committed_max_s"] for r in rounds),
            "commits_lost": sum(r["commits_lost"] for r in rounds), "starts_behind_acknowledged": starts_behind,
            "commits": sum(int(r["commits"]) for r in final), "commit_failures": dict(failures),
            "poll_errors": dict(errors), "messages_consumed": sum(int(r["messages"]) for r in final),
            "produced": produced,
            "consumer": {"poll_timeout_s": args.poll_timeout, "fetch_max_wait_ms": args.fetch_max_wait_ms,
                         "session_timeout_ms": args.session_timeout_ms,
                         "heartbeat_interval_ms": args.heartbeat_interval_ms, "workers": args.workers}}


def text_lines(args: argparse.Namespace, result: dict[str, Any]) -> list[str]:
    settings = " ".join(f"--set {s}" for s in args.settings) or "the brokers' defaults"
    lines = [f"rill perf group-failover: {args.brokers} brokers ({settings}), {args.groups} groups of "
             f"{args.members} members on a topic of {args.partitions} partitions (factor {args.brokers}), "
             f"{args.rate:g} messages/s"]
    for i, r in enumerate(result["rounds"]):
        role = "the controller, " if r["victim_is_controller"] else ""
        lines.append(f"  round {i + 1}: kill -9 of broker {r['victim']} ({role}coordinator of {r['victim_groups']} "
                     f"of {args.groups} groups; {r['commits_lost']} of {r['partitions_checked']} partitions lost an "
                     f"acknowledged commit)")
        lines.append(f"    every member consumed again after {r['consumed_max_s']:.2f} s (median member "
                     f"{r['consumed_median_s']:.2f} s), had a commit acknowledged after {r['committed_max_s']:.2f} s "
                     f"(median {r['committed_median_s']:.2f} s); steady gap between polls with messages "
                     f"{(r['steady_gap_median_s'] or 0) * 1000:.0f} ms (median member)")
        for group, g in sorted(r["groups"].items(), key=lambda kv: -kv[1]["consumed_max_s"]):
            lines.append(f"      {group}: {'moved ' if g['moved'] else 'stayed'} {g['coordinator_before']}->"
                         f"{g['coordinator_after']}: consumed max {g['consumed_max_s']:.2f} s median "
                         f"{g['consumed_median_s']:.2f} s; committed max {g['committed_max_s']:.2f} s")
    lines.append(f"  median over rounds of the slowest member: consumed {result['consumed_max_s_median']:.2f} s, "
                 f"committed {result['committed_max_s_median']:.2f} s; commits lost {result['commits_lost']}, "
                 f"members that started behind an acknowledged commit {result['starts_behind_acknowledged']}")
    lines.append(f"  {result['commits']:,} commits acknowledged, refused or failed: {result['commit_failures'] or 'none'}; "
                 f"poll errors: {result['poll_errors'] or 'none'}; produced {result['produced']}")
    return lines


__all__ = ["add_parsers", "choose_victim", "run_group_failover"]
