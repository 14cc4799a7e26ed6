"""``rill produce``: one message per input line, from stdin or a file."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from rill.client.cli.common import CliError, add_broker_arguments, info, non_negative_int, positive_int, topic_name
from rill.client.protocol.messages import CODEC_GZIP, CODEC_NONE
from rill.client.protocol.requests import ANY_PARTITION, Acks
from rill.client.simple import SimpleProducer

ACKS = {"append": Acks.APPEND, "fsync": Acks.FSYNC, "none": None}
CODECS = {"none": CODEC_NONE, "gzip": CODEC_GZIP}


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "produce", help="send lines from stdin or a file as messages",
        description="Send one message per input line (the trailing newline is not part of the message). "
                    "A summary goes to stderr.")
    add_broker_arguments(p)
    p.add_argument("-t", "--topic", required=True, type=topic_name)
    p.add_argument("-p", "--partition", type=non_negative_int, default=None,
                   help="partition to append to (default: the broker picks one per batch)")
    p.add_argument("-f", "--file", metavar="PATH", help="read lines from this file instead of stdin")
    p.add_argument("--acks", choices=list(ACKS), default="append",
                   help="append: acknowledged once in the log (default); fsync: once on disk; "
                        "none: fire and forget (Kafka 0.7 PRODUCE)")
    p.add_argument("-z", "--compression", choices=list(CODECS), default="none",
                   help="compress each batch into one message (default: none)")
    p.add_argument("--batch-size", type=positive_int, default=200, metavar="N",
                   help="messages per request (default: 200; 1 when reading a terminal)")
    p.set_defaults(run=run)


def read_lines(stream: BinaryIO) -> Iterator[bytes]:
    """Lines of ``stream`` without their ``\\n`` (a last line without one is kept)."""
    for line in stream:
        yield line[:-1] if line.endswith(b"\n") else line


def batches(lines: Iterable[bytes], size: int) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    for line in lines:
        batch.append(line)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def run(args: argparse.Namespace) -> int:
    host, port = args.broker
    stream: BinaryIO
    if args.file:
        try:
            stream = open(args.file, "rb")
        except OSError as exc:
            raise CliError(f"cannot read {args.file}: {exc.strerror}") from exc
    else:
        stream = sys.stdin.buffer
    batch_size = 1 if stream.isatty() else args.batch_size
    acks = ACKS[args.acks]
    partition = ANY_PARTITION if args.partition is None else args.partition
    started = time.perf_counter()
    count = size = 0
    per_partition: Counter[int] = Counter()
    with stream, SimpleProducer(host, port, acks=acks or Acks.APPEND, codec=CODECS[args.compression],
                                timeout=args.timeout) as producer:
        for batch in batches(read_lines(stream), batch_size):
            if acks is None:
                producer.send_async(args.topic, batch, partition)
            else:
                ack = producer.send(args.topic, batch, partition)
                per_partition[ack.partition] += len(batch)
            count += len(batch)
            size += sum(len(m) for m in batch)
        if acks is None:
            producer.flush()
    elapsed = time.perf_counter() - started
    where = ", ".join(f"{args.topic}-{p}: {n}" for p, n in sorted(per_partition.items())) or args.topic
    acked = "sent (unacknowledged)" if acks is None else "acknowledged"
    info(f"rill produce: {count} messages ({size} bytes) {acked} in {elapsed:.3f} s [{where}]")
    return 0
