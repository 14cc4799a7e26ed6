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
Dates and durations are in rill.client.cli.reset_targets; the partitions and offsets are worked out in
rill.client.cli.rewind_plan (shared with ``rill console``'s rewind form).

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

from rill.client.cli.bootstrap import add_admin_arguments
from rill.client.cli.command_config import security_of
from rill.client.cli.common import EXIT_USAGE, CliError, info, non_negative_int
from rill.client.cli.group_admin import add_group_argument, group_admin, group_names
from rill.client.cli.reset_targets import duration_ms, parse_datetime_ms, parse_duration_ms, topic_spec
from rill.client.cli.rewind_plan import DataPlane, RewindRequest, Scope, data_plane, refusal, rewind_offsets

__all__ = ["PLAN_HEADER", "add_rewind", "rewind_request"]

PLAN_HEADER = "GROUP\tTOPIC\tPARTITION\tNEW-OFFSET"


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
    request = rewind_request(args)
    with group_admin(args, group) as found:
        if not found.exists:
            raise CliError(f"group {group!r} does not exist (create it with: rill groups create {group})")
        admin = found.admin

        def reads() -> DataPlane:  # only a shift reads messages
            return data_plane(args.bootstrap, admin, args.timeout, security_of(args), via_grpc=bool(args.grpc))

        response = rewind_offsets(admin, group, request, reads, execute=args.execute)
    if response.error_code:
        raise CliError(f"nothing moved: {refusal(response)}")
    print(PLAN_HEADER)
    for o in sorted(response.actual_offsets, key=lambda o: (o.topic, o.partition)):
        print(f"{group}\t{o.topic}\t{o.partition}\t{o.offset}")
    if args.execute:
        info(f"Moved {len(response.actual_offsets)} offset(s) of group {group}.")
    else:
        info("Dry run: nothing moved. Run again with --execute to move these offsets.")
    return 0


def rewind_request(args: argparse.Namespace) -> RewindRequest:
    """The rewind the arguments ask for (a duration resolved against the clock now)."""
    to_time = args.to_datetime if args.to_datetime is not None else \
        parse_duration_ms(args.by_duration) if args.by_duration is not None else None
    return RewindRequest(_scope(args), to_earliest=bool(args.to_earliest), to_latest=bool(args.to_latest),
                         to_offset=args.to_offset, to_time_ms=None if to_time is None else max(0, int(to_time)),
                         shift_by=args.shift_by)


def _scope(args: argparse.Namespace) -> Scope | None:
    """The topics asked for, each with its partitions (empty: all); None for --all-topics."""
    if args.partition:
        if args.all_topics or len(args.topic or []) != 1 or args.topic[0][1]:
            raise CliError("--partition goes with one --topic T (or write --topic T:P,P)", EXIT_USAGE)
        return ((args.topic[0][0], tuple(sorted(set(args.partition)))),)
    return None if args.all_topics else tuple(args.topic)
