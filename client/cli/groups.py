"""``rill groups list|describe|delete|rewind``, after kafka-consumer-groups.

They talk to a broker's gRPC port (``--grpc HOST:PORT``, default ``$RILL_GRPC`` or
localhost:9093). ``rewind`` works on a live group: the owners of the rewound
partitions are told through their heartbeats and resume from the new offsets.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from datetime import datetime, timezone

from rill.client.cli.common import CliError, non_negative_int, positive_float, topic_name
from rill.client.grpc_client import AdminClient, error_name
from rill.v1 import coordinator_pb2 as pb

GRPC_ENV = "RILL_GRPC"
DEFAULT_GRPC = "localhost:9093"
_DURATION = re.compile(r"([+-]?)(\d+(?:\.\d+)?)([smhd])\Z")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def add_grpc_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--grpc", "--bootstrap-server", dest="grpc", metavar="HOST:PORT",
                        default=os.environ.get(GRPC_ENV) or DEFAULT_GRPC,
                        help=f"a broker's gRPC address (default: ${GRPC_ENV} or {DEFAULT_GRPC})")
    parser.add_argument("--timeout", type=positive_float, default=30.0, metavar="SECONDS",
                        help="deadline of each call (default: 30)")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("groups", help="list, describe, delete or rewind consumer groups",
                              description="Manage consumer groups through a broker's group coordinator.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="every group with its state, members and coordinator")
    add_grpc_arguments(listing)
    listing.set_defaults(run=run_list)
    describe = actions.add_parser("describe", help="members, assignment, committed offsets and lag")
    add_grpc_arguments(describe)
    describe.add_argument("group")
    describe.set_defaults(run=run_describe)
    delete = actions.add_parser("delete", help="delete groups that have no members")
    add_grpc_arguments(delete)
    delete.add_argument("group", nargs="+")
    delete.set_defaults(run=run_delete)
    rewind = actions.add_parser("rewind", help="move a (live) group's committed offsets")
    add_grpc_arguments(rewind)
    rewind.add_argument("group")
    rewind.add_argument("-t", "--topic", required=True, type=topic_name)
    rewind.add_argument("-p", "--partition", type=non_negative_int, help="one partition (default: all)")
    target = rewind.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-offset", type=non_negative_int, metavar="N", help="a byte offset (needs --partition)")
    target.add_argument("--to-time", metavar="ISO8601", help="the first message appended at or after this time")
    target.add_argument("--by-duration", metavar="-1h", help="the first message appended this long ago (s, m, h, d)")
    target.add_argument("--to-earliest", action="store_true")
    target.add_argument("--to-latest", action="store_true")
    rewind.add_argument("--dry-run", action="store_true", help="show the offsets it would set, move nothing")
    rewind.set_defaults(run=run_rewind)


def parse_time_ms(text: str) -> int:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"--to-time: not an ISO 8601 time: {text!r}", 2) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def parse_duration_ms(text: str, now: float | None = None) -> int:
    """``-1h`` (or ``1h``) means one hour before now: the timestamp in ms."""
    match = _DURATION.match(text.strip())
    if not match:
        raise CliError(f"--by-duration: expected e.g. -30m, -1h, -2d; got {text!r}", 2)
    seconds = float(match.group(2)) * _UNIT_S[match.group(3)]
    return int(((time.time() if now is None else now) - seconds) * 1000)


def run_list(args: argparse.Namespace) -> int:
    with AdminClient(args.grpc, args.timeout) as client:
        groups = client.list_groups().groups_info
    print("GROUP\tSTATE\tGENERATION\tMEMBERS\tTOPICS\tCOORDINATOR")
    for g in sorted(groups, key=lambda g: g.group_name):
        coordinator = f"{g.controller_broker.broker_id}@{g.controller_broker.host}:{g.controller_broker.port}"
        print(f"{g.group_name}\t{g.state}\t{g.generation}\t{len(g.group_members)}\t{','.join(g.topics)}\t{coordinator}")
    return 0


def run_describe(args: argparse.Namespace) -> int:
    with AdminClient(args.grpc, args.timeout) as client:
        d = client.describe_group(args.group)
    if d.error_code == pb.NOT_COORDINATOR and d.coordinator.grpc_port:  # in a cluster: ask the coordinator it names
        with AdminClient(f"{d.coordinator.host}:{d.coordinator.grpc_port}", args.timeout) as client:
            d = client.describe_group(args.group)
    if d.error_code:
        raise CliError(f"group {args.group!r}: {error_name(d.error_code)}")
    print(f"Group {d.consumer_group}: {d.state}, generation {d.generation}, strategy {d.assignment_strategy}, "
          f"{len(d.members)} member(s), coordinator broker {d.coordinator.broker_id}")
    print("TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG_BYTES\tLAG_SECONDS\tOWNER")
    for p in d.partitions:
        committed = "-" if p.committed_offset < 0 else str(p.committed_offset)
        end = "-" if p.end_offset < 0 else str(p.end_offset)  # unknown: its broker is not alive
        lag = "-" if p.lag_bytes < 0 else str(p.lag_bytes)
        seconds = "-" if p.lag_seconds < 0 else f"{p.lag_seconds:.1f}"  # unknown: its broker did not answer
        print(f"{p.topic}\t{p.partition}\t{committed}\t{end}\t{lag}\t{seconds}\t{p.owner or '-'}")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    with AdminClient(args.grpc, args.timeout) as client:
        response = client.delete_groups(args.group)
    for name in response.deleted_consumer_groups:
        print(f"Deleted group {name}.")
    for err in response.errors:
        print(f"Group {err.consumer_group} not deleted: {error_name(err.error_code)}")
    return 1 if response.error_code else 0


def _rewind_request(args: argparse.Namespace, client: AdminClient) -> tuple[list[tuple[str, int, int]], pb.RewindTarget, int]:
    if args.to_offset is not None and args.partition is None:
        raise CliError("--to-offset needs --partition (offsets are byte positions of one partition)", 2)
    if args.partition is not None:
        partitions = [args.partition]
    else:
        described = client.describe_topics([args.topic]).topics
        if not described or described[0].error_code:
            raise CliError(f"topic {args.topic!r} does not exist")
        partitions = list(range(described[0].partition_count))
    offset = args.to_offset if args.to_offset is not None else -1
    entries = [(args.topic, p, offset) for p in partitions]
    if args.to_offset is not None:
        return entries, pb.OFFSET, 0
    if args.to_earliest:
        return entries, pb.EARLIEST, 0
    if args.to_latest:
        return entries, pb.LATEST, 0
    stamp = parse_time_ms(args.to_time) if args.to_time else parse_duration_ms(args.by_duration)
    return entries, pb.TIMESTAMP, stamp


def run_rewind(args: argparse.Namespace) -> int:
    with AdminClient(args.grpc, args.timeout) as client:
        entries, target, stamp = _rewind_request(args, client)
        response = client.rewind(args.group, entries, target=target, timestamp_ms=stamp, dry_run=args.dry_run)
    verb = "Would set" if args.dry_run else "Set"
    print("TOPIC\tPARTITION\tNEW_OFFSET\tRESULT")
    for o in response.actual_offsets:
        print(f"{o.topic}\t{o.partition}\t{o.offset}\t{error_name(o.error_code) if o.error_code else 'ok'}")
    if response.error_code:
        raise CliError(f"nothing moved: {error_name(response.error_code)}")
    print(f"{verb} {len(response.actual_offsets)} offset(s) of group {args.group}.")
    return 0
