"""``rill topics elect-leaders``: preferred leader election, as Kafka's ``kafka-leader-election.sh
--election-type preferred``.

Asks any broker's Admin service (its gRPC port found through ``--bootstrap-server``, or
``--grpc``) for ElectLeaders; the AdminClient follows a NOT_CONTROLLER answer to the
controller. ``--topic T`` elects every partition of T
(``--partition P``, repeatable, only those); ``--all-topics`` every partition of every
replicated topic. One line per partition on stdout, in Kafka's words, then a summary::

    Successfully completed leader election (PREFERRED) for partition orders-0: leader 1
    Valid replica already elected for partition orders-1: leader 2
    Error completing leader election (PREFERRED) for partition orders-2: PREFERRED_LEADER_NOT_AVAILABLE: ...
    Summary: 1 elected, 1 already had their preferred leader, 1 failed (3 partitions).

Exit status 1 when a partition failed (an already preferred leader is not a failure), as
Kafka's tool.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from rill.client.cli.command_config import security_of
from rill.client.cli.common import CliError, non_negative_int, topic_name
from rill.client.cli.bootstrap import add_admin_arguments, admin_address
from rill.client.grpc_client import AdminClient, error_name
from rill.v1 import admin_pb2 as apb
from rill.v1 import coordinator_pb2 as pb

ELECTION = "Successfully completed leader election (PREFERRED) for partition"
ALREADY = "Valid replica already elected for partition"
FAILED = "Error completing leader election (PREFERRED) for partition"


def add_elect_leaders(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    elect = actions.add_parser("elect-leaders", help="give partitions back to their preferred leaders",
                               description="Preferred leader election (kafka-leader-election.sh): the controller "
                                           "makes each partition's first assigned replica its leader again, where "
                                           "that replica is alive and in sync.")
    add_admin_arguments(elect)
    which = elect.add_mutually_exclusive_group(required=True)
    which.add_argument("-t", "--topic", type=topic_name, help="the topic whose partitions to elect")
    which.add_argument("--all-topics", "--all-topic-partitions", dest="all_topics", action="store_true",
                       help="every partition of every replicated topic")
    elect.add_argument("-p", "--partition", action="append", type=non_negative_int, default=[], metavar="P",
                       help="only this partition of --topic (repeatable)")
    elect.add_argument("--election-type", type=str.lower, choices=["preferred"], default="preferred",
                       help="only preferred is supported (Kafka's unclean election is a topic setting here)")
    elect.set_defaults(run=run_elect_leaders)


def run_elect_leaders(args: argparse.Namespace) -> int:
    if args.partition and not args.topic:
        raise CliError("--partition needs --topic")
    asked: list[tuple[str, int | None]] | None = None
    if args.topic:
        asked = [(args.topic, p) for p in args.partition] or [(args.topic, None)]
    with AdminClient(admin_address(args), args.timeout, security=security_of(args)) as client:
        response = client.elect_leaders(asked, timeout_ms=int(args.timeout * 1000))
    if response.error_code:
        raise CliError(f"leader election failed: {error_name(response.error_code)}: {response.error_message}")
    for result in response.results:
        print(result_line(result))
    failed = sum(1 for r in response.results if r.error_code not in (pb.NONE, pb.ELECTION_NOT_NEEDED))
    print(summary(response.results))
    if failed:
        raise CliError(f"{failed} partition(s) could not be elected")
    return 0


def result_line(result: apb.PartitionElectionResult) -> str:
    """One partition's line (Kafka's phrases; ``topic`` alone for a named topic that is not replicated)."""
    name = result.topic if result.partition < 0 else f"{result.topic}-{result.partition}"
    if result.error_code == pb.NONE:
        return f"{ELECTION} {name}: leader {result.leader}"
    if result.error_code == pb.ELECTION_NOT_NEEDED:
        return f"{ALREADY} {name}: leader {result.leader}"
    leader = f" (leader {result.leader})" if result.leader >= 0 else ""
    return f"{FAILED} {name}: {error_name(result.error_code)}: {result.error_message}{leader}"


def summary(results: Iterable[apb.PartitionElectionResult]) -> str:
    """``Summary: E elected, A already had their preferred leader, F failed (N partitions).``"""
    rows = list(results)
    elected = sum(1 for r in rows if r.error_code == pb.NONE)
    already = sum(1 for r in rows if r.error_code == pb.ELECTION_NOT_NEEDED)
    return (f"Summary: {elected} elected, {already} already had their preferred leader, "
            f"{len(rows) - elected - already} failed ({len(rows)} partition{'' if len(rows) == 1 else 's'}).")
