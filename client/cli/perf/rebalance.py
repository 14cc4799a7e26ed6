"""``rill perf rebalance``: how long a group takes to rebalance when a member leaves and one joins.

Creates a topic and a group, brings ``--members`` members in (each a thread running the
seed 003 loop, :class:`~rill.client.cli.perf.group_members.MemberLoop`: register,
heartbeat every ``--heartbeat-interval-ms``, re-register with its id on
REBALANCE_IN_PROGRESS) and waits until the group is stable. Each round then has one
member leave (LeaveGroup; the others rebalance, timed as ``leave``) and a new member
join: the figure is the time from the new member's RegisterConsumer call until every
member, old and new, holds its assignment of the new generation (its RegisterConsumer
of that generation has returned). Members learn of a rebalance from their next
heartbeat, so the heartbeat interval bounds how soon they re-register. Every stable
assignment is checked: each partition owned by exactly one member. Everything it
registers leaves at the end (the group is ephemeral).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from rill.client.grpc_client import AdminClient
from rill.client.cli.common import CliError, info, positive_float, positive_int, topic_name
from rill.client.cli.perf.group_members import (
    CLIENT_ID, Member, MemberLoop, check_assignment, check_loops, create_group, ensure_topic, group_arguments,
    leave_all, run_id, stop_loops, wait_stable,
)
from rill.client.cli.perf.report import report


def add_parsers(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``rebalance`` to ``rill perf``'s subcommands."""
    rebalance = kinds.add_parser("rebalance", help="time for a group to rebalance when a member joins")
    group_arguments(rebalance, "perf-rebalance")
    rebalance.add_argument("-t", "--topic", type=topic_name, default="perf-rebalance",
                           help="topic the group consumes, created if missing (default: perf-rebalance)")
    rebalance.add_argument("--partitions", type=positive_int, default=256, metavar="N",
                           help="partitions of the topic (default: 256); an existing topic must have this many")
    rebalance.add_argument("--members", type=positive_int, default=32, metavar="N", help="group size (default: 32)")
    rebalance.add_argument("--rounds", type=positive_int, default=5, metavar="N",
                           help="rounds of one member leaving and one joining (default: 5)")
    rebalance.add_argument("--heartbeat-interval-ms", type=positive_int, default=20, metavar="MS",
                           help="each member heartbeats this often (default: 20)")
    rebalance.add_argument("--strategy", choices=("range", "roundrobin", "sticky"), default="range")
    rebalance.add_argument("--stable-timeout", type=positive_float, default=60.0, metavar="SECONDS",
                           help="give up if the group is not stable this long after a change (default: 60)")
    rebalance.set_defaults(run=run_rebalance)


def run_rebalance(args: argparse.Namespace) -> int:
    group = f"{args.group_prefix}-{run_id()}"
    interval = args.heartbeat_interval_ms / 1000
    loops: list[MemberLoop] = []
    gone: list[Member] = []
    rounds: list[dict[str, Any]] = []
    with AdminClient(args.grpc, args.timeout, client_id=CLIENT_ID) as admin:
        ensure_topic(admin, args.topic, args.partitions)
        create_group(admin, group, [args.topic], args.session_timeout_ms, args.strategy)

        def new_member() -> MemberLoop:
            return MemberLoop(Member(args.grpc, group, args.timeout, args.session_timeout_ms), interval)

        try:
            started = time.perf_counter()
            loops = [new_member().start() for _ in range(args.members)]
            generation = wait_stable(admin, group, loops, args.stable_timeout)
            check_assignment([lp.member for lp in loops], args.topic, args.partitions)
            if not args.quiet:
                info(f"  {args.members} members stable at generation {generation} "
                     f"after {time.perf_counter() - started:.2f} s")
            for n in range(1, args.rounds + 1):
                leaving = loops.pop(0)
                leaving.stop(args.timeout)
                check_loops([leaving])
                t_leave = time.perf_counter()
                leaving.member.leave()
                gone.append(leaving.member)
                left_at = wait_stable(admin, group, loops, args.stable_timeout, above=generation)
                leave_s = max(lp.member.joined[left_at] for lp in loops) - t_leave
                check_assignment([lp.member for lp in loops], args.topic, args.partitions)
                joining = new_member()
                loops.append(joining.start())
                joined_at = wait_stable(admin, group, loops, args.stable_timeout, above=left_at)
                if min(joining.member.joined) != joined_at:
                    raise CliError(f"round {n}: the new member's first RegisterConsumer answered generation "
                                   f"{min(joining.member.joined)}, and the group settled at {joined_at}: "
                                   "another change overlapped the round")
                join_s = max(lp.member.joined[joined_at] for lp in loops) - joining.member.first_register_started
                check_assignment([lp.member for lp in loops], args.topic, args.partitions)
                rounds.append({"round": n, "join_s": join_s, "leave_s": leave_s, "generation": joined_at,
                               "generations": joined_at - left_at})
                if not args.quiet:
                    info(f"  round {n}: join {join_s * 1000:.0f} ms (generation {joined_at}), "
                         f"leave {leave_s * 1000:.0f} ms")
                generation = joined_at
        finally:
            stop_loops(loops)
            leave_all([lp.member for lp in loops] + gone)
    joins = [r["join_s"] for r in rounds]
    leaves = [r["leave_s"] for r in rounds]
    result = {
        "benchmark": "rebalance", "members": args.members, "partitions": args.partitions, "strategy": args.strategy,
        "heartbeat_interval_ms": args.heartbeat_interval_ms, "session_timeout_ms": args.session_timeout_ms,
        "rounds": rounds, "join_median_s": statistics.median(joins), "join_max_s": max(joins),
        "leave_median_s": statistics.median(leaves), "leave_max_s": max(leaves),
        "unknown_member_rejoins": sum(m.unknown for m in [lp.member for lp in loops] + gone),
    }
    report(args, result, [
        f"rill perf rebalance: {args.members} members, {args.partitions} partitions ({args.strategy}), "
        f"heartbeat every {args.heartbeat_interval_ms} ms, {args.rounds} round(s) of one leave and one join",
        "  join (new member's RegisterConsumer until every member holds the new generation): "
        + ", ".join(f"{s * 1000:.0f}" for s in joins) + " ms",
        f"  join median {result['join_median_s'] * 1000:.0f} ms, max {result['join_max_s'] * 1000:.0f} ms; "
        f"leave (LeaveGroup until the rest hold the new generation) median "
        f"{result['leave_median_s'] * 1000:.0f} ms, max {result['leave_max_s'] * 1000:.0f} ms",
    ])
    return 0


__all__ = ["add_parsers", "run_rebalance"]
