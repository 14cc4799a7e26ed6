"""``rill groups describe GROUP``: a group's offsets and lag, its members (``--members``) or its state
(``--state``), as ``kafka-consumer-groups --describe``. Tab-separated, one header line.

Offsets (the default), after a summary line::

    Group app: Stable, generation 3, strategy range, 2 member(s), coordinator broker 1
    TOPIC   PARTITION  COMMITTED  END  LAG_BYTES  LAG_SECONDS  OWNER

``-`` where a value is unknown: no committed offset, a partition whose broker is down.

``--members`` (Kafka's columns; ASSIGNMENT as its ``--verbose`` prints it, ``topic(0,1)``)::

    GROUP  CONSUMER-ID  HOST  CLIENT-ID  #PARTITIONS  ASSIGNMENT

HOST is ``-``: rill's coordinator does not record where a member connects from (the
describe answer has no such field); a ZooKeeper consumer's host is in its id. ``--state``::

    GROUP  COORDINATOR (ID)  ASSIGNMENT-STRATEGY  STATE  #MEMBERS

COORDINATOR is the coordinator's data-plane address. With ``--zookeeper`` the group is
a group of ZooKeeper consumers, read from ZooKeeper (``groups_zookeeper``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from rill.client.cli.bootstrap import add_admin_arguments
from rill.client.cli.common import EXIT_USAGE, CliError, info
from rill.client.cli.group_admin import add_group_argument, group_admin, group_names
from rill.client.cli.groups_zookeeper import add_zookeeper_argument, run_describe_zookeeper, zookeeper_members
from rill.client.grpc_client import error_name
from rill.v1 import admin_pb2 as apb

__all__ = ["MEMBERS_HEADER", "OFFSETS_HEADER", "STATE_HEADER", "add_describe", "assignment_text"]

OFFSETS_HEADER = "TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG_BYTES\tLAG_SECONDS\tOWNER"
MEMBERS_HEADER = "GROUP\tCONSUMER-ID\tHOST\tCLIENT-ID\t#PARTITIONS\tASSIGNMENT"
STATE_HEADER = "GROUP\tCOORDINATOR (ID)\tASSIGNMENT-STRATEGY\tSTATE\t#MEMBERS"


def add_describe(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``describe`` action of ``rill groups``."""
    describe = actions.add_parser("describe", help="committed offsets and lag, --members or --state",
                                  description="Describe a consumer group (kafka-consumer-groups --describe).")
    add_admin_arguments(describe)
    add_zookeeper_argument(describe)
    add_group_argument(describe)
    view = describe.add_mutually_exclusive_group()
    view.add_argument("--offsets", dest="view", action="store_const", const="offsets",
                      help="each partition's committed offset, end and lag (the default)")
    view.add_argument("--members", dest="view", action="store_const", const="members",
                      help="each member: CONSUMER-ID, HOST, CLIENT-ID, #PARTITIONS, ASSIGNMENT")
    view.add_argument("--state", dest="view", action="store_const", const="state",
                      help="the group's coordinator, assignment strategy, state and member count")
    describe.set_defaults(run=run_describe, view="offsets")


def run_describe(args: argparse.Namespace) -> int:
    group = group_names(args)[0]
    if args.zookeeper:
        if args.view == "state":
            raise CliError("--state describes a group of the coordinator; a ZooKeeper group has no state: "
                           "use --members", EXIT_USAGE)
        if args.view == "members":
            print_member_rows(group, [(m.consumer_id, m.host, m.client_id, m.assignment)
                                      for m in zookeeper_members(args, group)])
            return 0
        return run_describe_zookeeper(args, group)
    with group_admin(args, group) as found:
        if not found.exists:
            raise CliError(f"group {group!r} does not exist")
        d = found.admin.describe_group(group)
    if d.error_code:
        raise CliError(f"group {group!r}: {error_name(d.error_code)}")
    if args.view == "members":
        print_members(d)
    elif args.view == "state":
        print(STATE_HEADER)
        c = d.coordinator
        print(f"{d.consumer_group}\t{c.host}:{c.port} ({c.broker_id})\t{d.assignment_strategy}\t{d.state}\t"
              f"{len(d.members)}")
    else:
        print_offsets(d)
    return 0


def print_offsets(d: apb.DescribeGroupResponse) -> None:
    print(f"Group {d.consumer_group}: {d.state}, generation {d.generation}, strategy {d.assignment_strategy}, "
          f"{len(d.members)} member(s), coordinator broker {d.coordinator.broker_id}")
    print(OFFSETS_HEADER)
    for p in d.partitions:
        committed = "-" if p.committed_offset < 0 else str(p.committed_offset)
        end = "-" if p.end_offset < 0 else str(p.end_offset)  # unknown: its broker is not alive
        lag = "-" if p.lag_bytes < 0 else str(p.lag_bytes)
        seconds = "-" if p.lag_seconds < 0 else f"{p.lag_seconds:.1f}"  # unknown: its broker did not answer
        print(f"{p.topic}\t{p.partition}\t{committed}\t{end}\t{lag}\t{seconds}\t{p.owner or '-'}")


def print_members(d: apb.DescribeGroupResponse) -> None:
    print_member_rows(d.consumer_group, [(m.consumer_id, "-", m.client_id or "-",
                                          [(tp.topic, tp.partition) for tp in m.assignment]) for m in d.members])


Owned = Sequence[tuple[str, int]] | Sequence[tuple[str, str]]


def print_member_rows(group: str, rows: Sequence[tuple[str, str, str, Owned]]) -> None:
    """The ``--members`` table: (consumer id, host, client id, owned (topic, partition)) per member."""
    print(MEMBERS_HEADER)
    for consumer, host, client, owned in rows:
        print(f"{group}\t{consumer}\t{host}\t{client}\t{len(owned)}\t{assignment_text(owned)}")
    if not rows:
        info(f"Consumer group '{group}' has no active members.")


def assignment_text(partitions: Owned) -> str:
    """Kafka's ASSIGNMENT column: ``orders(0,2),audit(1)`` by topic (ZooKeeper groups name partitions
    ``broker-partition``: ``orders(0-0,1-0)``); ``-`` for none."""
    by_topic: dict[str, list[int | str]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return ",".join(f"{t}({','.join(str(p) for p in sorted(ps, key=_order))})"
                    for t, ps in sorted(by_topic.items())) or "-"


def _order(partition: int | str) -> tuple[int, str]:
    return (partition, "") if isinstance(partition, int) else (0, partition)
