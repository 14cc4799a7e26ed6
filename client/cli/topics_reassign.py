"""``rill topics reassign``: move partitions to other brokers, as Kafka's ``kafka-reassign-partitions.sh``.

Three modes, plans in Kafka's JSON (reassign_plan.py):

- ``--generate --topics-to-move-json-file F --broker-list 1,2,3`` reads the topics' current
  replicas (DescribeTopics) and prints them and a proposal spreading them over the brokers
  listed; nothing moves. Save the proposal (the last line) as the plan to execute.
- ``--execute --reassignment-json-file F [--throttle BYTES_PER_S]`` prints the current
  assignment of the partitions in the plan (keep it to roll back) and asks the controller
  to start the moves (AlterPartitionReassignments; any broker may be asked, the AdminClient
  follows NOT_CONTROLLER). With ``--throttle`` the brokers fetch the replicas being added
  at most that fast in all (AlterReplicationThrottle, before the moves start), so copying
  a large partition does not starve clients; run ``--verify`` until the moves complete,
  which removes the throttle.
- ``--verify --reassignment-json-file F`` says for each partition of the plan whether its
  move is complete or still in progress (ListPartitionReassignments, DescribeTopics), and
  once every one is complete removes the throttle.

Exit status: 0 (verify: every move complete), 1 on an error or a partition that is neither
moved nor moving, 3 from ``--verify`` while some move is still in progress.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from rill.client.cli.command_config import security_of
from rill.client.cli.common import CliError, info, positive_int
from rill.client.cli.bootstrap import add_admin_arguments, admin_address
from rill.client.cli.reassign_plan import Move, PlanError, parse_plan, parse_topics, plan_json, propose
from rill.client.grpc_client import AdminClient, error_name
from rill.v1 import coordinator_pb2 as pb

__all__ = ["EXIT_IN_PROGRESS", "add_reassign"]

EXIT_IN_PROGRESS = 3


def broker_list(text: str) -> list[int]:
    """argparse type for ``1,2,3``."""
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected broker ids like 1,2,3, got {text!r}") from None
    if not ids or any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError(f"expected broker ids like 1,2,3, got {text!r}")
    return ids


def add_reassign(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``reassign`` action of ``rill topics``."""
    reassign = actions.add_parser("reassign", help="move partitions to other brokers (kafka-reassign-partitions.sh)",
                                  description="Move replicated partitions to other brokers with no unavailability: "
                                              "--generate a plan, --execute it, --verify it.")
    add_admin_arguments(reassign)
    mode = reassign.add_mutually_exclusive_group(required=True)
    mode.add_argument("--generate", action="store_true", help="propose a plan for --topics-to-move-json-file")
    mode.add_argument("--execute", action="store_true", help="start the moves of --reassignment-json-file")
    mode.add_argument("--verify", action="store_true",
                      help="say which moves of --reassignment-json-file are complete; remove the throttle when all are")
    reassign.add_argument("--topics-to-move-json-file", type=Path, metavar="FILE",
                          help='{"version":1,"topics":[{"topic":"t"}]} (with --generate)')
    reassign.add_argument("--broker-list", type=broker_list, metavar="1,2,3",
                          help="the brokers to spread the replicas over (with --generate)")
    reassign.add_argument("--reassignment-json-file", type=Path, metavar="FILE",
                          help='{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3,4]}]}')
    reassign.add_argument("--throttle", type=positive_int, metavar="BYTES_PER_S",
                          help="with --execute: the rate each broker may copy the replicas it adds, in all")
    reassign.set_defaults(run=run_reassign)


def run_reassign(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except PlanError as exc:
        raise CliError(str(exc)) from None


def _run(args: argparse.Namespace) -> int:
    with AdminClient(admin_address(args), args.timeout, security=security_of(args)) as client:
        if args.generate:
            if args.topics_to_move_json_file is None or args.broker_list is None:
                raise CliError("--generate needs --topics-to-move-json-file and --broker-list")
            return generate(client, parse_topics(_read(args.topics_to_move_json_file)), args.broker_list)
        if args.reassignment_json_file is None:
            raise CliError("--execute and --verify need --reassignment-json-file")
        moves = parse_plan(_read(args.reassignment_json_file))
        if args.execute:
            return execute(client, moves, args.throttle, args.timeout)
        if args.throttle is not None:
            raise CliError("--throttle goes with --execute")
        return verify(client, moves)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from exc


def current_assignment(client: AdminClient, topics: Sequence[str]) -> dict[str, list[tuple[int, ...]]]:
    """Each replicated topic's replicas per partition (as DescribeTopics gives them). Raises CliError for
    a topic that does not exist or is not replicated."""
    found: dict[str, list[tuple[int, ...]]] = {}
    for desc in client.describe_topics(sorted(set(topics))).topics:
        if desc.error_code:
            raise CliError(f"topic {desc.topic}: {error_name(desc.error_code)}")
        if not all(p.replicas for p in desc.partitions):
            raise CliError(f"topic {desc.topic} is a 0.7-style topic (one copy, on its broker): it cannot be moved")
        found[desc.topic] = [tuple(p.replicas) for p in sorted(desc.partitions, key=lambda p: p.partition)]
    return found


def generate(client: AdminClient, topics: Sequence[str], brokers: Sequence[int]) -> int:
    current = current_assignment(client, topics)
    proposed = propose(current, brokers)
    print("Current partition replica assignment")
    print(plan_json([(t, p, r) for t, rs in current.items() for p, r in enumerate(rs)]))
    print()
    print("Proposed partition reassignment configuration")
    print(plan_json(proposed))
    return 0


def execute(client: AdminClient, moves: Sequence[Move], throttle: int | None, timeout_s: float) -> int:
    current = current_assignment(client, [t for t, _, _ in moves])
    rollback = [(t, p, current[t][p]) for t, p, _ in moves if p < len(current[t])]
    print("Current partition replica assignment")
    print()
    print(plan_json(rollback))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    if throttle is not None:
        answer = client.alter_replication_throttle(throttle)
        if answer.error_code:
            raise CliError(f"the throttle was not set: {error_name(answer.error_code)}: {answer.error_message}")
        print("Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
              "throttle is removed.")
        print(f"The inter-broker throttle limit was set to {throttle} B/s")
    response = client.alter_partition_reassignments(moves, timeout_ms=int(timeout_s * 1000))
    if response.error_code:
        raise CliError(f"the reassignment was not started: {error_name(response.error_code)}: "
                       f"{response.error_message}")
    failed = [r for r in response.results if r.error_code != pb.NONE]
    started = [f"{r.topic}-{r.partition}" for r in response.results if r.error_code == pb.NONE]
    if started:
        print(f"Successfully started partition reassignment{'s' if len(started) > 1 else ''} for {','.join(started)}")
    for r in failed:
        print(f"Error reassigning partition {r.topic}-{r.partition}: {error_name(r.error_code)}: {r.error_message}")
    if failed:
        raise CliError(f"{len(failed)} partition(s) could not be reassigned")
    return 0


def verify(client: AdminClient, moves: Sequence[Move]) -> int:
    listed = client.list_partition_reassignments()  # all of them: the throttle stays while any is under way
    if listed.error_code:
        raise CliError(f"cannot list the reassignments: {error_name(listed.error_code)}: {listed.error_message}")
    moving = {(o.topic, o.partition) for o in listed.reassignments}
    current = current_assignment(client, [t for t, _, _ in moves])
    print("Status of partition reassignment:")
    in_progress = failed = 0
    for topic, partition, target in moves:
        name = f"{topic}-{partition}"
        replicas = current[topic][partition] if partition < len(current[topic]) else ()
        if (topic, partition) in moving:
            in_progress += 1
            print(f"Reassignment of partition {name} is still in progress.")
        elif replicas == target:
            print(f"Reassignment of partition {name} is completed.")
        else:
            failed += 1
            print(f"There is no active reassignment of partition {name}, but replica set is "
                  f"{list(replicas)} rather than {list(target)}.")
    if in_progress or failed:
        if failed:
            raise CliError(f"{failed} partition(s) are not where the plan puts them")
        return EXIT_IN_PROGRESS
    if listed.throttle_bytes_per_second > 0 and not listed.reassignments:
        answer = client.alter_replication_throttle(0)
        if answer.error_code:
            raise CliError(f"the throttle was not removed: {error_name(answer.error_code)}: {answer.error_message}")
        print(f"Clearing the replication throttle (was {answer.previous} B/s)")
    elif listed.throttle_bytes_per_second > 0:
        info("Other reassignments are under way: the replication throttle stays.")
    return 0
