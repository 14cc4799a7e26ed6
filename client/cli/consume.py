"""``rill consume``: print messages to stdout, one per line (kcat -C, kafka-console-consumer)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator

from rill.client.cli.common import (CliError, EXIT_USAGE, add_broker_arguments, info, non_negative_int,
                                    positive_int, topic_name, unknown_topic)
from rill.client.cli.formatting import DEFAULT_FORMAT, OFFSET_FORMAT, compile_format
from rill.client.errors import BrokerError, InvalidOffset, OffsetOutOfRange, UnknownTopic
from rill.client.protocol.messages import Message
from rill.client.protocol.requests import FetchRequest
from rill.client.simple import DEFAULT_FETCH_SIZE_LIMIT, DEFAULT_MAX_FETCH_SIZE, FetchResult, SimpleConsumer

EARLIEST = ("earliest", "beginning", "smallest")
LATEST = ("latest", "end", "largest")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "consume", help="print messages to stdout",
        description="Print a topic's messages to stdout, one per line, from the given offset to the end of "
                    "each partition (or forever with --follow). A summary goes to stderr.")
    add_broker_arguments(p)
    p.add_argument("-t", "--topic", required=True, type=topic_name)
    p.add_argument("-p", "--partition", type=non_negative_int, default=None,
                   help="consume only this partition (default: every partition)")
    start = p.add_mutually_exclusive_group()
    start.add_argument("-o", "--offset", type=parse_offset, default="earliest", metavar="earliest|latest|N",
                       help="where to start: earliest (default), latest, or a byte offset N "
                            "(a message boundary; needs --partition)")
    start.add_argument("--from-beginning", dest="offset", action="store_const", const="earliest",
                       help="same as --offset earliest")
    p.add_argument("-F", "--follow", action="store_true",
                   help="keep waiting for new messages (long poll) instead of exiting at the end")
    p.add_argument("-c", "--max-messages", type=positive_int, default=None, metavar="N",
                   help="exit after N messages")
    p.add_argument("--format", default=None, metavar="FMT",
                   help="kcat-style output format: %%s payload, %%S payload length, %%t topic, %%p partition, "
                        "%%o offset, %%n next offset, %%%% a percent sign; \\n \\t \\xHH escapes; "
                        "a newline ends each message (default: '%%s')")
    p.add_argument("--print-offset", action="store_true",
                   help="prefix each message with 'Partition:P<TAB>Offset:O<TAB>'")
    p.add_argument("--fetch-size", type=positive_int, default=DEFAULT_MAX_FETCH_SIZE, metavar="BYTES",
                   help=f"bytes per partition per fetch (default: {DEFAULT_MAX_FETCH_SIZE})")
    p.add_argument("--poll-ms", type=positive_int, default=1000, metavar="MS",
                   help="with --follow: longest wait of each long poll (default: 1000)")
    p.add_argument("-q", "--quiet", action="store_true", help="no summary on stderr")
    p.set_defaults(run=run)


def parse_offset(text: str) -> str | int:
    """``earliest``/``latest`` (or kcat's beginning/end) or a non-negative byte offset."""
    lowered = text.lower()
    if lowered in EARLIEST:
        return "earliest"
    if lowered in LATEST:
        return "latest"
    return non_negative_int(text)


def output_format(args: argparse.Namespace) -> str:
    fmt = args.format if args.format is not None else DEFAULT_FORMAT
    if args.print_offset:
        fmt = OFFSET_FORMAT.replace("%s", fmt)
    return fmt


def run(args: argparse.Namespace) -> int:
    if isinstance(args.offset, int) and args.partition is None:
        raise CliError("--offset N needs --partition (a byte offset belongs to one partition)", EXIT_USAGE)
    try:
        render = compile_format(output_format(args))
    except ValueError as exc:
        raise CliError(f"--format: {exc}", EXIT_USAGE) from exc
    host, port = args.broker
    out = sys.stdout.buffer
    printed = 0
    limit = max(args.fetch_size, DEFAULT_FETCH_SIZE_LIMIT)
    with SimpleConsumer(host, port, max_fetch_size=args.fetch_size, fetch_size_limit=limit,
                        timeout=args.timeout) as consumer:
        positions = start_positions(consumer, args)
        try:
            for messages in poll(consumer, args.topic, positions, args.follow, args.poll_ms, args.fetch_size):
                if args.max_messages is not None:
                    messages = messages[:args.max_messages - printed]
                data = b"".join([render(m) for m in messages])
                printed += len(messages)  # counted before the write, which Ctrl-C can interrupt after it wrote
                out.write(data)
                out.flush()
                if args.max_messages is not None and printed >= args.max_messages:
                    break
        finally:  # also on Ctrl-C and errors, like kafka-console-consumer
            if not args.quiet:
                info(f"Processed a total of {printed} messages")
    return 0


def start_positions(consumer: SimpleConsumer, args: argparse.Namespace) -> dict[int, int]:
    """The starting offset of each partition to consume."""
    try:
        count = consumer.partitions_for(args.topic)
    except UnknownTopic:
        raise unknown_topic(args.topic) from None
    if args.partition is not None and args.partition >= count:
        raise CliError(f"topic {args.topic!r} has {count} partition(s): use --partition 0..{count - 1}")
    partitions = range(count) if args.partition is None else [args.partition]
    if args.offset == "earliest":
        return {p: consumer.earliest_offset(args.topic, p) for p in partitions}
    if args.offset == "latest":
        return {p: consumer.latest_offset(args.topic, p) for p in partitions}
    return {p: int(args.offset) for p in partitions}


def poll(consumer: SimpleConsumer, topic: str, positions: dict[int, int], follow: bool, poll_ms: int,
         fetch_size: int) -> Iterator[list[Message]]:
    """Yield batches of messages, partition by partition, round after round.

    Without ``follow`` a partition is done at its first empty fetch (the end of its
    log at that moment); with ``follow`` every round is a long poll and never ends.
    """
    active = dict(positions)
    while active:
        fetches = [FetchRequest(topic, p, offset, fetch_size) for p, offset in active.items()]
        results = consumer.fetch_wait(fetches, poll_ms) if follow else consumer.multifetch(fetches)
        for result in results:
            if result.error is not None:
                raise fetch_error(consumer, result, result.error)
            if result.messages:
                yield result.messages
            if result.next_offset == result.offset and not follow:
                del active[result.partition]
            else:
                active[result.partition] = result.next_offset


def fetch_error(consumer: SimpleConsumer, result: FetchResult, error: BrokerError) -> CliError:
    where = f"{result.topic}-{result.partition}"
    if isinstance(error, OffsetOutOfRange):
        try:
            earliest = consumer.earliest_offset(result.topic, result.partition)
            latest = consumer.latest_offset(result.topic, result.partition)
        except BrokerError:
            return CliError(f"offset {result.offset} is out of range for {where}")
        return CliError(f"offset {result.offset} is out of range for {where} "
                        f"(earliest {earliest}, latest {latest})")
    if isinstance(error, InvalidOffset):
        return CliError(f"offset {result.offset} is not a message boundary in {where} "
                        "(use an offset printed by --print-offset, or earliest/latest)")
    return CliError(str(error))
