"""``rill produce``: one message per input line, from stdin or a file (kcat -P, kafka-console-producer).

Batches of ``--batch-size`` lines go to one partition each: ``--partition N`` (the
cluster-wide number, sent to the broker that holds it), or round robin over the live
partitions from a random first one. A summary goes to stderr.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from rill.client.cli.command_config import security_of
from rill.client.cli.common import CliError, add_broker_arguments, info, non_negative_int, positive_int, topic_name
from rill.client.protocol.messages import CODEC_GZIP, CODEC_NONE
from rill.client.protocol.requests import ANY_PARTITION, Acks, PartitionAck
from rill.client.errors import BrokerError
from rill.client.cluster_metadata import ClusterMetadata
from rill.client.simple import SimpleProducer

ACKS = {"append": Acks.APPEND, "fsync": Acks.FSYNC, "all": Acks.ALL, "none": None}
CODECS = {"none": CODEC_NONE, "gzip": CODEC_GZIP}
RETRY_BACKOFF_S = 0.1  # before asking for metadata again after a stale-metadata error (Kafka's retry.backoff.ms)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "produce", help="send lines from stdin or a file as messages",
        description="Send one message per input line (the trailing newline is not part of the message). "
                    "A summary goes to stderr.")
    add_broker_arguments(p)
    p.add_argument("-t", "--topic", required=True, type=topic_name)
    p.add_argument("-p", "--partition", type=non_negative_int, default=None,
                   help="partition to append to, numbered cluster-wide as METADATA and rill topics describe "
                        "number them; it is sent to the broker that holds it (default: batches go round robin "
                        "over the partitions whose broker is alive, from a random one; a topic that does not "
                        "exist yet is created by the first --bootstrap-server, which picks)")
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
    started = time.perf_counter()
    count = size = 0
    per_partition: Counter[int] = Counter()
    with stream, PartitionRouter(args) as router:
        for batch in batches(read_lines(stream), batch_size):
            producer, partition, number = router.next()
            if acks is None:
                producer.send_async(args.topic, batch, number)
            else:
                partition, ack = send_acknowledged(router, producer, partition, number, batch)
                per_partition[partition if partition is not None else ack.partition] += len(batch)
            count += len(batch)
            size += sum(len(m) for m in batch)
        router.flush()
    elapsed = time.perf_counter() - started
    where = ", ".join(f"{args.topic}-{p}: {n}" for p, n in sorted(per_partition.items())) or args.topic
    acked = "sent (unacknowledged)" if acks is None else "acknowledged"
    info(f"rill produce: {count} messages ({size} bytes) {acked} in {elapsed:.3f} s [{where}]")
    return 0


def send_acknowledged(router: PartitionRouter, producer: SimpleProducer, partition: int | None, number: int,
                      batch: list[bytes]) -> tuple[int | None, PartitionAck]:
    """Send ``batch`` and wait for its acknowledgement. An error that says the metadata was stale (not the
    leader, no leader yet, an unknown topic being created) wrote nothing: metadata is asked again and the
    batch sent where it now says, for up to ``--timeout`` seconds (30 without one)."""
    deadline = time.monotonic() + (router.args.timeout or 30.0)
    while True:
        try:
            return partition, producer.send(router.topic, batch, number)
        except BrokerError as exc:
            if not exc.invalid_metadata or time.monotonic() >= deadline:
                raise
        time.sleep(RETRY_BACKOFF_S)
        router.refresh()
        producer, partition, number = router.next()


class PartitionRouter:
    """Where each batch goes: (producer connected to the partition's broker, the cluster-wide
    partition or None when the broker picks, the partition's number on that broker).

    Partitions are the cluster-wide numbers METADATA gives (a single broker's own); a
    request carries the partition's number on its broker (docs/protocol.md). Without
    ``--partition`` batches go round robin over the live partitions from a random one, as
    Kafka's partitioners start, so small inputs do not all land in partition 0.
    """

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.topic: str = args.topic
        self.producers: dict[tuple[str, int], SimpleProducer] = {}
        self.metadata = ClusterMetadata(args.bootstrap, timeout=args.timeout or 10.0, security=security_of(args))
        self.turn = random.randrange(1 << 30)  # a random first partition, as Kafka's partitioners start
        self.refresh()

    def refresh(self) -> None:
        """Ask for the topic's metadata again and choose the partitions to send to from it."""
        args = self.args
        self.metadata.refresh([self.topic])  # ConnectionClosed when no bootstrap broker answers
        count = self.metadata.partitions(self.topic)
        self.targets: list[int | None]
        if args.partition is not None:
            if count is not None and args.partition >= count:
                raise CliError(f"topic {self.topic!r} has {count} partition(s): use --partition 0..{count - 1}")
            self.targets = [args.partition]
        elif count is None:
            self.targets = [None]  # a new topic: the first --bootstrap-server broker creates it and picks
        else:
            self.targets = [p for p in range(count) if self.metadata.leader(self.topic, p) is not None] or [None]

    def __enter__(self) -> PartitionRouter:
        return self

    def __exit__(self, *exc: object) -> None:
        for producer in self.producers.values():
            producer.close()

    def next(self) -> tuple[SimpleProducer, int | None, int]:
        partition = self.targets[self.turn % len(self.targets)]
        self.turn += 1
        if partition is None:
            return self._producer(self.args.broker), None, ANY_PARTITION
        if self.metadata.partitions(self.topic) is None:  # a new topic: the first bootstrap broker creates it
            return self._producer(self.args.broker), partition, partition
        leader = self.metadata.leader(self.topic, partition)
        if leader is None:
            raise CliError(f"{self.topic}-{partition} is unavailable: its broker is not alive")
        return (self._producer((leader.host, leader.port)), partition,
                self.metadata.broker_partition(self.topic, partition))

    def _producer(self, address: tuple[str, int]) -> SimpleProducer:
        producer = self.producers.get(address)
        if producer is None:
            acks = ACKS[self.args.acks]
            producer = self.producers[address] = SimpleProducer(
                address[0], address[1], acks=acks or Acks.APPEND, codec=CODECS[self.args.compression],
                timeout=self.args.timeout, security=self.metadata.security)
        return producer

    def flush(self) -> None:
        if ACKS[self.args.acks] is None:
            for producer in self.producers.values():
                producer.flush()
