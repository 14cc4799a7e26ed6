"""``rill groups rewind GROUP`` (also ``reset-offsets``): move a group's committed offsets, as
``kafka-consumer-groups --reset-offsets``: a plan first, the move only with ``--execute``.

Which partitions (one of):

- ``--topic T`` (every partition of T), ``--topic T:0,2`` (some), repeatable; rill's
  older ``--topic T --partition P`` still works;
- ``--all-topics``: every partition of the topics the group consumes or has committed
  offsets for (with ``--shift-by``: those it has committed offsets for, as Kafka).

Where to (one of): ``--to-earliest``, ``--to-latest``, ``--to-offset N`` (a byte offset,
which must be a message boundary; outside the log it is clamped to its start or end,
as Kafka does, with a warning), ``--to-datetime`` (Kafka's ``YYYY-MM-DDTHH:mm:SS.sss``,
local time, or ISO 8601), ``--by-duration`` (``PT1H``, ``-1h``, ``1h30m``: that long
ago), ``--shift-by N`` (N messages after the committed offset, or before it when N is
negative: walked on message boundaries, rill.client.cli.message_walk; clamped to the log).
Dates and durations are in rill.client.cli.reset_targets.

The plan is printed as Kafka prints it, tab-separated::

    GROUP  TOPIC  PARTITION  NEW-OFFSET

Without ``--execute`` (``--dry-run``, the default) nothing moves: the plan is the
coordinator's answer to RewindConsumer with ``dry_run``, which resolves and checks every
offset as a move would. With ``--execute`` the same request moves them, all or none
(exit status 1 and the reason per partition when refused). Unlike Kafka's tool, a live
group may be rewound: its members learn of it through their heartbeats and resume
from the new offsets.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from rill.client.cli.bootstrap import add_admin_arguments
from rill.client.cli.command_config import security_of
from rill.client.cli.common import EXIT_USAGE, CliError, info, non_negative_int
from rill.client.cli.consume import TopicReader
from rill.client.cli.group_admin import add_group_argument, group_admin, group_names
from rill.client.cli.message_walk import shift_offset
from rill.client.cli.reset_targets import duration_ms, parse_datetime_ms, parse_duration_ms, topic_spec
from rill.client.grpc_client import AdminClient, error_name
from rill.client.protocol.messages import Message
from rill.v1 import coordinator_pb2 as pb

__all__ = ["PLAN_HEADER", "add_rewind"]

PLAN_HEADER = "GROUP\tTOPIC\tPARTITION\tNEW-OFFSET"

Partition = tuple[str, int]


def add_rewind(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``rewind`` action of ``rill groups`` (alias ``reset-offsets``)."""
    p = actions.add_parser("rewind", aliases=["reset-offsets"], help="plan, then --execute, moving a group's offsets",
                           description="Move a (live) group's committed offsets (kafka-consumer-groups "
                                       "--reset-offsets): prints the plan, and moves nothing without --execute.")
    add_admin_arguments(p)
    add_group_argument(p)
    scope = p.add_mutually_exclusive_group(required=True)
    scope.add_argument("-t", "--topic", action="append", type=topic_spec, metavar="TOPIC[:P[,P]]",
                       help="a topic, or some of its partitions (repeatable)")
    scope.add_argument("--all-topics", action="store_true", help="every topic the group consumes or committed")
    p.add_argument("-p", "--partition", action="append", type=non_negative_int, default=[], metavar="P",
                   help="a partition of the one --topic (repeatable; same as --topic T:P)")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-offset", type=non_negative_int, metavar="N", help="a byte offset (a message boundary)")
    target.add_argument("--to-datetime", "--to-time", dest="to_datetime", type=parse_datetime_ms,
                        metavar="YYYY-MM-DDTHH:mm:SS.sss",
                        help="the first message appended at or after this time (local time, or ISO 8601 with a zone)")
    target.add_argument("--by-duration", type=_duration, metavar="PnDTnHnMnS|-1h",
                        help="the first message appended this long ago (PT1H, P1DT12H, -1h, 1h30m, 2d)")
    target.add_argument("--shift-by", type=int, metavar="N",
                        help="N messages on from the committed offset (back when negative)")
    target.add_argument("--to-earliest", action="store_true", help="the log start")
    target.add_argument("--to-latest", action="store_true", help="the log end")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the plan, move nothing (the default)")
    mode.add_argument("--execute", action="store_true", help="move the offsets")
    p.set_defaults(run=run_rewind)


def _duration(text: str) -> str:
    duration_ms(text)  # checked while parsing; resolved against the clock when the command runs
    return text


def run_rewind(args: argparse.Namespace) -> int:
    group = group_names(args)[0]
    scope = _scope(args)
    with group_admin(args, group) as found:
        if not found.exists:
            raise CliError(f"group {group!r} does not exist (create it with: rill groups create {group})")
        admin = found.admin
        target, stamp = _target(args)
        if target == pb.OFFSET:
            entries = _offset_entries(args, admin, group, scope)
        else:
            entries = [(t, p, -1) for t, p in _partitions(admin, group, scope)] if scope is not None else []
        response = admin.rewind(group, entries, target=target, timestamp_ms=stamp, dry_run=not args.execute)
    if response.error_code == pb.INVALID_REQUEST and not entries:
        raise CliError(f"group {group!r} has no topics or committed offsets: name them with --topic")
    if response.error_code:
        raise CliError(f"nothing moved: {_refusal(response)}")
    print(PLAN_HEADER)
    for o in sorted(response.actual_offsets, key=lambda o: (o.topic, o.partition)):
        print(f"{group}\t{o.topic}\t{o.partition}\t{o.offset}")
    if args.execute:
        info(f"Moved {len(response.actual_offsets)} offset(s) of group {group}.")
    else:
        info("Dry run: nothing moved. Run again with --execute to move these offsets.")
    return 0


def _scope(args: argparse.Namespace) -> list[tuple[str, tuple[int, ...]]] | None:
    """The topics asked for, each with its partitions (empty: all); None for --all-topics."""
    if args.partition:
        if args.all_topics or len(args.topic or []) != 1 or args.topic[0][1]:
            raise CliError("--partition goes with one --topic T (or write --topic T:P,P)", EXIT_USAGE)
        return [(args.topic[0][0], tuple(sorted(set(args.partition))))]
    return None if args.all_topics else list(args.topic)


def _target(args: argparse.Namespace) -> tuple[pb.RewindTarget, int]:
    if args.to_earliest:
        return pb.EARLIEST, 0
    if args.to_latest:
        return pb.LATEST, 0
    if args.to_datetime is not None:
        return pb.TIMESTAMP, max(0, int(args.to_datetime))
    if args.by_duration is not None:
        return pb.TIMESTAMP, max(0, parse_duration_ms(args.by_duration))
    return pb.OFFSET, 0  # --to-offset, --shift-by: the offsets are worked out here


def _partitions(admin: AdminClient, group: str, scope: list[tuple[str, tuple[int, ...]]] | None,
                committed_only: bool = False) -> list[Partition]:
    """The partitions to move: those named, every partition of the topics named, or (None) the group's."""
    if scope is None:
        if committed_only:
            return sorted((o.topic, o.partition) for o in admin.fetch_offsets(group).offsets if o.offset >= 0)
        return sorted(_bounds(admin, group, [])[0])
    whole = [t for t, ps in scope if not ps]
    counts = {d.topic: d.partition_count for d in admin.describe_topics(whole).topics if not d.error_code} \
        if whole else {}
    missing = [t for t in whole if not counts.get(t)]
    if missing:
        raise CliError(f"unknown topic(s): {', '.join(missing)}")
    return sorted({(t, p) for t, ps in scope for p in (ps or range(counts[t]))})


def _bounds(admin: AdminClient, group: str,
            partitions: Sequence[Partition]) -> tuple[dict[Partition, int], dict[Partition, int]]:
    """Log start and end of each partition (of the group's, when none are given), as the coordinator resolves
    EARLIEST and LATEST (dry runs: nothing moves)."""
    entries = [(t, p, -1) for t, p in partitions]
    found = []
    for target in (pb.EARLIEST, pb.LATEST):
        response = admin.rewind(group, entries, target=target, dry_run=True)
        if response.error_code:
            if response.error_code == pb.INVALID_REQUEST and not entries:
                raise CliError(f"group {group!r} has no topics or committed offsets: name them with --topic")
            raise CliError(_refusal(response))
        found.append({(o.topic, o.partition): o.offset for o in response.actual_offsets})
    return found[0], found[1]


def _offset_entries(args: argparse.Namespace, admin: AdminClient, group: str,
                    scope: list[tuple[str, tuple[int, ...]]] | None) -> list[tuple[str, int, int]]:
    """The offsets of ``--to-offset`` (clamped to each log, as Kafka) or ``--shift-by`` (walked)."""
    shifting = args.shift_by is not None
    partitions = _partitions(admin, group, scope, committed_only=shifting)
    if not partitions:
        raise CliError(f"group {group!r} has no committed offsets to shift: name the partitions with --topic")
    starts, ends = _bounds(admin, group, partitions)
    if not shifting:
        return [(t, p, _clamp(args.to_offset, starts[(t, p)], ends[(t, p)], f"{t}-{p}")) for t, p in partitions]
    committed = {(o.topic, o.partition): o.offset for o in admin.fetch_offsets(group, partitions).offsets}
    missing = [f"{t}-{p}" for t, p in partitions if committed.get((t, p), -1) < 0]
    if missing:
        raise CliError(f"--shift-by moves a committed offset, and group {group!r} has none for {', '.join(missing)} "
                       "(give those --to-earliest, --to-latest or --to-datetime)")
    bootstrap = _data_plane(args, admin)
    entries = []
    for topic in sorted({t for t, _ in partitions}):
        with TopicReader(bootstrap, topic, timeout=args.timeout, security=security_of(args)) as reader:
            reader.partitions()
            for t, p in partitions:
                if t == topic:
                    log = _PartitionLog(reader, p)
                    entries.append((t, p, shift_offset(log, committed[(t, p)], args.shift_by, starts[(t, p)],
                                                       ends[(t, p)])))
    return entries


def _clamp(offset: int, start: int, end: int, name: str) -> int:
    if offset > end:
        info(f"New offset ({offset}) is higher than latest offset for topic partition {name}. Value will be set "
             f"to {end}")
        return end
    if offset < start:
        info(f"New offset ({offset}) is lower than earliest offset for topic partition {name}. Value will be set "
             f"to {start}")
        return start
    return offset


def _data_plane(args: argparse.Namespace, admin: AdminClient) -> list[tuple[str, int]]:
    """Data-plane addresses to read messages through: ``--bootstrap-server``, and with ``--grpc`` the brokers
    the cluster names (``--bootstrap-server`` may then be its unused default)."""
    if not args.grpc:
        return list(args.bootstrap)
    named = [(b.host, b.port) for b in admin.describe_cluster().brokers]
    return [*named, *(a for a in args.bootstrap if a not in named)]


class _PartitionLog:
    """One partition's reads at its broker, for :func:`~rill.client.cli.message_walk.shift_offset`."""

    def __init__(self, reader: TopicReader, partition: int) -> None:
        self.topic = reader.topic
        self.client, self.number = reader.client(partition)

    def fetch(self, offset: int) -> list[Message]:
        return self.client.fetch(self.topic, self.number, offset)

    def index_at_or_before(self, offset: int) -> int | None:
        entries = self.client.time_index(self.topic, self.number, offset, 1)
        return entries[0][0] if entries else None


def _refusal(response: pb.RewindConsumerResponse) -> str:
    """Why a rewind was refused: each partition's error, else the request's."""
    failed = [f"{o.topic}-{o.partition}: {error_name(o.error_code)}{f' (offset {o.offset})' if o.offset >= 0 else ''}"
              for o in response.actual_offsets if o.error_code]
    return "; ".join(failed) or error_name(response.error_code)
