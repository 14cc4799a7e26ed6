"""``rill consume``: print messages to stdout, one per line (kcat -C, kafka-console-consumer).

Without ``--group`` it reads the partitions itself (each from its broker, from
``--offset``) and keeps no offsets; ``--group G`` is consume_group's.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence

from rill.client.cli.command_config import security_of
from rill.client.security.client_security import ClientSecurity
from rill.client.cli.common import (CliError, EXIT_USAGE, add_broker_arguments, info, non_negative_int,
                                    positive_int, topic_name, unknown_topic)
from rill.client.cli.consume_group import run_group
from rill.client.cli.formatting import DEFAULT_FORMAT, OFFSET_FORMAT, compile_format
from rill.client.cluster_metadata import ClusterMetadata
from rill.client.errors import BrokerError, InvalidOffset, OffsetOutOfRange
from rill.client.protocol.messages import Message
from rill.client.protocol.requests import FetchRequest
from rill.client.simple import DEFAULT_FETCH_SIZE_LIMIT, DEFAULT_MAX_FETCH_SIZE, FetchResult, SimpleConsumer

EARLIEST = ("earliest", "beginning", "smallest")
LATEST = ("latest", "end", "largest")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "consume", help="print messages to stdout",
        description="Print a topic's messages to stdout, one per line, from the given offset to the end of "
                    "each partition (or forever with --follow); with --group, as a member of a consumer group "
                    "from its committed offsets. A summary goes to stderr.")
    add_broker_arguments(p)
    p.add_argument("-t", "--topic", required=True, type=topic_name)
    p.add_argument("-p", "--partition", type=non_negative_int, default=None,
                   help="consume only this partition (default: every partition)")
    p.add_argument("-G", "--group", metavar="GROUP", default=None,
                   help="consume as a member of this consumer group: its coordinator assigns the partitions, "
                        "reading starts at the group's committed offsets (--offset where none is) and each "
                        "batch written is committed (kcat -G)")
    start = p.add_mutually_exclusive_group()
    start.add_argument("-o", "--offset", type=parse_offset, default="earliest", metavar="earliest|latest|N",
                       help="where to start: earliest (default), latest, or a byte offset N "
                            "(a message boundary; needs --partition); with --group, where a partition without "
                            "a committed offset starts")
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
    if args.group is not None and (args.partition is not None or isinstance(args.offset, int)):
        raise CliError("--group takes the partitions its coordinator assigns, from the committed offsets: "
                       "not --partition or --offset N", EXIT_USAGE)
    if isinstance(args.offset, int) and args.partition is None:
        raise CliError("--offset N needs --partition (a byte offset belongs to one partition)", EXIT_USAGE)
    try:
        render = compile_format(output_format(args))
    except ValueError as exc:
        raise CliError(f"--format: {exc}", EXIT_USAGE) from exc
    if args.group is not None:
        with TopicReader(args.bootstrap, args.topic, timeout=args.timeout, security=security_of(args)) as reader:
            reader.partitions()  # an unknown topic is an error here too, not an empty assignment
        return run_group(args, render)
    out = sys.stdout.buffer
    printed = 0
    with TopicReader(args.bootstrap, args.topic, fetch_size=args.fetch_size, timeout=args.timeout,
                     security=security_of(args)) as reader:
        positions = start_positions(reader, args)
        try:
            for messages in poll(reader, positions, args.follow, args.poll_ms):
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


class TopicReader:
    """One topic's partitions, wherever they live: each read goes to the partition's broker.

    Partitions are the cluster-wide numbers METADATA gives (on a single broker, its
    own); a request carries the number the partition has on its broker, and messages
    come back under the cluster-wide number.
    """

    def __init__(self, bootstrap: Sequence[tuple[str, int]], topic: str, *, fetch_size: int = DEFAULT_MAX_FETCH_SIZE,
                 timeout: float | None, security: ClientSecurity | None = None) -> None:
        self.topic = topic
        self.fetch_size = fetch_size
        self.timeout = timeout
        self.metadata = ClusterMetadata(bootstrap, timeout=timeout or 10.0, security=security)
        self.clients: dict[tuple[str, int], SimpleConsumer] = {}

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(self, *exc: object) -> None:
        for client in self.clients.values():
            client.close()

    def partitions(self) -> int:
        """The topic's partition count (asks METADATA). Raises CliError for an unknown topic, ConnectionClosed
        when no bootstrap broker answers."""
        self.metadata.refresh([self.topic])
        count = self.metadata.partitions(self.topic)
        if count is None:
            raise unknown_topic(self.topic)
        return count

    def available(self, partition: int) -> bool:
        """Whether the partition's broker is alive (as of the last metadata)."""
        return self.metadata.leader(self.topic, partition) is not None

    def client(self, partition: int) -> tuple[SimpleConsumer, int]:
        """The partition's broker and its number there; CliError when that broker is not alive."""
        leader = self.metadata.leader(self.topic, partition)
        if leader is None:
            raise CliError(f"{self.topic}-{partition} is unavailable: its broker is not alive")
        address = (leader.host, leader.port)
        client = self.clients.get(address)
        if client is None:
            limit = max(self.fetch_size, DEFAULT_FETCH_SIZE_LIMIT)
            client = self.clients[address] = SimpleConsumer(
                leader.host, leader.port, max_fetch_size=self.fetch_size, fetch_size_limit=limit, timeout=self.timeout,
                security=self.metadata.security)
        return client, self.metadata.broker_partition(self.topic, partition)

    def earliest(self, partition: int) -> int:
        client, number = self.client(partition)
        return client.earliest_offset(self.topic, number)

    def latest(self, partition: int) -> int:
        client, number = self.client(partition)
        return client.latest_offset(self.topic, number)

    def fetch(self, positions: dict[int, int], wait_ms: int | None) -> list[FetchResult]:
        """One fetch of every partition (a long poll of up to ``wait_ms`` split between brokers, if given)."""
        by_broker: dict[tuple[str, int], list[tuple[int, FetchRequest]]] = {}
        for partition, offset in positions.items():
            client, number = self.client(partition)
            by_broker.setdefault((client.host, client.port), []).append(
                (partition, FetchRequest(self.topic, number, offset, self.fetch_size)))
        results: list[FetchResult] = []
        for address, entries in by_broker.items():
            client, fetches = self.clients[address], [f for _, f in entries]
            got = (client.fetch_wait(fetches, max(1, wait_ms // len(by_broker))) if wait_ms is not None
                   else client.multifetch(fetches))
            for (partition, request), result in zip(entries, got):
                if request.partition != partition:
                    result = result._replace(partition=partition, messages=[
                        m._replace(partition=partition) for m in result.messages])
                results.append(result)
        return results


def start_positions(reader: TopicReader, args: argparse.Namespace) -> dict[int, int]:
    """The starting offset of each partition to consume."""
    count = reader.partitions()
    if args.partition is not None and args.partition >= count:
        raise CliError(f"topic {args.topic!r} has {count} partition(s): use --partition 0..{count - 1}")
    partitions: list[int] = list(range(count)) if args.partition is None else [args.partition]
    if args.partition is None:
        down = [p for p in partitions if not reader.available(p)]
        if down and len(down) < len(partitions):
            info(f"rill consume: skipping {len(down)} partition(s) whose broker is not alive: "
                 + ", ".join(f"{args.topic}-{p}" for p in down))
            partitions = [p for p in partitions if p not in down]
    if args.offset == "earliest":
        return {p: reader.earliest(p) for p in partitions}
    if args.offset == "latest":
        return {p: reader.latest(p) for p in partitions}
    return {p: int(args.offset) for p in partitions}


def poll(reader: TopicReader, positions: dict[int, int], follow: bool, poll_ms: int) -> Iterator[list[Message]]:
    """Yield batches of messages, partition by partition, round after round.

    Without ``follow`` a partition is done at its first empty fetch (the end of its
    log at that moment); with ``follow`` every round is a long poll and never ends.
    """
    active = dict(positions)
    while active:
        for result in reader.fetch(active, poll_ms if follow else None):
            if result.error is not None:
                raise fetch_error(reader, result, result.error)
            if result.messages:
                yield result.messages
            if result.next_offset == result.offset and not follow:
                del active[result.partition]
            else:
                active[result.partition] = result.next_offset


def fetch_error(reader: TopicReader, result: FetchResult, error: BrokerError) -> CliError:
    where = f"{result.topic}-{result.partition}"
    if isinstance(error, OffsetOutOfRange):
        try:
            earliest, latest = reader.earliest(result.partition), reader.latest(result.partition)
        except BrokerError:
            return CliError(f"offset {result.offset} is out of range for {where}")
        return CliError(f"offset {result.offset} is out of range for {where} "
                        f"(earliest {earliest}, latest {latest})")
    if isinstance(error, InvalidOffset):
        return CliError(f"offset {result.offset} is not a message boundary in {where} "
                        "(use an offset printed by --print-offset, or earliest/latest)")
    return CliError(str(error))
