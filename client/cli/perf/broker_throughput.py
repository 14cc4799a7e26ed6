"""``rill perf produce|consume``: the broker's ingest and read throughput, with pre-encoded requests.

- ``produce`` measures broker ingest: pipelined PRODUCE_ACK requests, each carrying
  ``--batch`` messages for every partition of the topic, ``--inflight`` of them
  outstanding per connection. The request frames are encoded before the clock starts
  (a small rotating pool, as Kafka's perf tools reuse payloads), so CRC and encoding
  are not on the client's clock; every response is checked for errors.
- ``consume`` reads every partition from its earliest offset to the end offset seen
  at the start, one FETCH per partition in flight (the next fetch of a partition is
  sent before the previous response is decoded), and decodes and CRC-checks every
  message.

Both connect as ``--command-config`` says (``security.protocol``, ``ssl.*``, ``sasl.*``), so
the same figures can be taken on a TLS or SASL listener.
"""

from __future__ import annotations

import argparse
import math
import threading
import time
from collections import deque

from rill.client.cli.command_config import security_of
from rill.client.cli.common import CliError, info, positive_int, unknown_topic
from rill.client.cli.perf.broker_requests import ACKS, ack_errors, data_plane_arguments, ensure_topic, produce_frames
from rill.client.cli.perf.report import MB, PROGRESS_INTERVAL, report
from rill.client.blocking_connection import BrokerConnection
from rill.client.errors import UnknownTopic, error_for_code
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import LENGTH, decode_message_set
from rill.client.simple import DEFAULT_FETCH_SIZE_LIMIT, SimpleConsumer


def add_parsers(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``produce`` and ``consume`` to ``rill perf``'s subcommands."""
    produce = kinds.add_parser("produce", help="broker ingest with pipelined acknowledged produces")
    data_plane_arguments(produce)
    produce.add_argument("--partitions", type=positive_int, default=None, metavar="N",
                         help="partitions to create the topic with if it does not exist (default: 1); "
                              "an existing topic must have this many")
    produce.add_argument("--message-size", type=positive_int, default=200, metavar="BYTES")
    produce.add_argument("--batch", type=positive_int, default=50, metavar="N",
                         help="messages per partition per request (default: 50)")
    produce.add_argument("--messages", type=positive_int, default=500_000, metavar="N",
                         help="messages to send, rounded up to whole requests (default: 500000)")
    produce.add_argument("--inflight", type=positive_int, default=16, metavar="N",
                         help="requests outstanding per connection (default: 16)")
    produce.add_argument("--acks", choices=list(ACKS), default="append")
    produce.add_argument("--connections", type=positive_int, default=1, metavar="N")
    produce.add_argument("--pool", type=positive_int, default=8, metavar="N",
                         help="distinct request frames encoded before timing, sent in rotation (default: 8)")
    produce.set_defaults(run=run_produce)

    consume = kinds.add_parser("consume", help="read and CRC-check every message of a topic")
    data_plane_arguments(consume)
    consume.add_argument("--fetch-size", type=positive_int, default=1_048_576, metavar="BYTES")
    consume.set_defaults(run=run_consume)


# ---------------------------------------------------------------- produce


class ProduceWorker:
    """Sends ``requests`` frames on one connection with ``inflight`` outstanding; checks each ack."""

    def __init__(self, conn: BrokerConnection, frames: list[bytes], requests: int, inflight: int,
                 partitions: int) -> None:
        self.conn = conn
        self.frames = frames
        self.requests = requests
        self.inflight = inflight
        self.partitions = partitions
        self.done = 0
        self.wire_bytes = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # handed to the main thread
            self.error = exc

    def _run(self) -> None:
        conn, frames, pool, total = self.conn, self.frames, len(self.frames), self.requests
        sent = 0
        while sent < min(self.inflight, total):
            conn.send(frames[sent % pool])
            self.wire_bytes += len(frames[sent % pool])
            sent += 1
        while self.done < total:
            error, acks = rq.decode_produce_ack_response(conn.read_response())
            if error or len(acks) != self.partitions or any(a.error for a in acks):
                raise CliError(f"produce request {self.done} failed: {ack_errors(error, acks)}")
            self.done += 1
            if sent < total:
                frame = frames[sent % pool]
                conn.send(frame)
                self.wire_bytes += len(frame)
                sent += 1


def run_produce(args: argparse.Namespace) -> int:
    host, port = args.broker
    security = security_of(args)
    with SimpleConsumer(host, port, timeout=args.timeout, security=security) as client:
        partitions = ensure_topic(client, args.topic, args.partitions)
    per_request = args.batch * partitions
    requests = math.ceil(args.messages / per_request)
    frames = produce_frames(args.topic, partitions, args.batch, args.message_size, ACKS[args.acks],
                            min(args.pool, requests))
    connections = min(args.connections, requests)
    shares = [requests // connections + (1 if i < requests % connections else 0) for i in range(connections)]
    conns = [BrokerConnection(host, port, args.timeout, security=security) for _ in range(connections)]
    workers = [ProduceWorker(c, frames, n, args.inflight, partitions) for c, n in zip(conns, shares)]
    try:
        elapsed = _run_workers(workers, per_request, args.quiet)
    finally:
        for conn in conns:
            conn.close()
    messages = requests * per_request
    wire = sum(w.wire_bytes for w in workers)
    result = {
        "benchmark": "produce", "messages": messages, "message_size": args.message_size, "seconds": elapsed,
        "messages_per_s": messages / elapsed, "mb_per_s": messages * args.message_size / MB / elapsed,
        "wire_mb_per_s": wire / MB / elapsed, "requests": requests, "batch": args.batch, "partitions": partitions,
        "inflight": args.inflight, "connections": connections, "acks": args.acks,
    }
    report(args, result, [
        f"rill perf produce: {messages:,} messages of {args.message_size} B in {elapsed:.2f} s",
        f"  {result['messages_per_s']:,.0f} messages/s, {result['mb_per_s']:.1f} MB/s of payload, "
        f"{result['wire_mb_per_s']:.1f} MB/s of requests",
        f"  {requests:,} requests of {per_request} messages ({args.batch} x {partitions} partitions), "
        f"{args.inflight} in flight x {connections} connection(s), acks={args.acks}",
    ])
    return 0


def _run_workers(workers: list[ProduceWorker], per_request: int, quiet: bool) -> float:
    threads = [threading.Thread(target=w.run, name=f"rill-perf-{i}", daemon=True) for i, w in enumerate(workers)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    next_report = started + PROGRESS_INTERVAL
    for t in threads:
        while t.is_alive():
            t.join(timeout=0.2)
            now = time.perf_counter()
            if now >= next_report and not quiet:
                done = sum(w.done for w in workers) * per_request
                info(f"  ... {done:,} messages acknowledged, {done / (now - started):,.0f} messages/s")
                next_report = now + PROGRESS_INTERVAL
    elapsed = time.perf_counter() - started
    for w in workers:
        if w.error is not None:
            raise w.error
    return elapsed


def run_consume(args: argparse.Namespace) -> int:
    host, port = args.broker
    security = security_of(args)
    with SimpleConsumer(host, port, timeout=args.timeout, security=security) as client:
        try:
            partitions = client.partitions_for(args.topic)
        except UnknownTopic:
            raise unknown_topic(args.topic) from None
        starts = {p: client.earliest_offset(args.topic, p) for p in range(partitions)}
        ends = {p: client.latest_offset(args.topic, p) for p in range(partitions)}
    with BrokerConnection(host, port, args.timeout, max_response_size=DEFAULT_FETCH_SIZE_LIMIT + 64,
                          security=security) as conn:
        started = time.perf_counter()
        count, payload, wire = consume_all(conn, args.topic, starts, ends, args.fetch_size)
        elapsed = time.perf_counter() - started
    result = {
        "benchmark": "consume", "messages": count, "payload_bytes": payload, "seconds": elapsed,
        "messages_per_s": count / elapsed if elapsed else 0.0, "mb_per_s": payload / MB / elapsed if elapsed else 0.0,
        "wire_mb_per_s": wire / MB / elapsed if elapsed else 0.0, "partitions": partitions,
        "fetch_size": args.fetch_size,
    }
    report(args, result, [
        f"rill perf consume: {count:,} messages ({payload:,} B of payload) from {partitions} partition(s) "
        f"in {elapsed:.2f} s, every CRC checked",
        f"  {result['messages_per_s']:,.0f} messages/s, {result['mb_per_s']:.1f} MB/s of payload, "
        f"{result['wire_mb_per_s']:.1f} MB/s of message sets",
    ])
    return 0


def consume_all(conn: BrokerConnection, topic: str, starts: dict[int, int], ends: dict[int, int],
                fetch_size: int) -> tuple[int, int, int]:
    """Fetch every partition from ``starts`` to ``ends``: (messages, payload bytes, message-set bytes).

    One FETCH per partition is outstanding; a partition's next fetch (at the end of the
    data just received, which the broker ends on a message boundary) is sent before that
    data is decoded, so the broker works while the client checks CRCs.
    """
    outstanding: deque[tuple[int, int, int]] = deque()

    def fetch(partition: int, offset: int, size: int) -> None:
        conn.send(rq.encode_fetch(topic, partition, offset, size))
        outstanding.append((partition, offset, size))

    for p, start in starts.items():
        if start < ends[p]:
            fetch(p, start, fetch_size)
    count = payload = wire = 0
    while outstanding:
        p, offset, size = outstanding.popleft()
        error, data = rq.decode_fetch_response(conn.read_response())
        if error:
            raise CliError(f"fetch of {topic}-{p} at offset {offset}: {error_for_code(error)}")
        n = len(data)
        if n == 0:
            continue  # the log ends earlier than it did (retention): done with this partition
        if n >= 4 and 4 + LENGTH.unpack_from(data)[0] > n:  # one message bigger than the fetch size
            needed = 4 + LENGTH.unpack_from(data)[0]
            if size >= DEFAULT_FETCH_SIZE_LIMIT:
                raise CliError(f"{topic}-{p}: message at offset {offset} needs a fetch of {needed} bytes")
            fetch(p, offset, min(max(2 * size, needed), DEFAULT_FETCH_SIZE_LIMIT))
            continue
        if offset + n < ends[p]:
            fetch(p, offset + n, fetch_size)
        messages, consumed = decode_message_set(data, topic, p, offset)
        if consumed != n:
            raise CliError(f"{topic}-{p}: fetch at offset {offset} returned {n} bytes that do not end on a "
                           f"message boundary ({consumed} bytes of whole messages)")
        count += len(messages)
        payload += sum([len(m.value) for m in messages])
        wire += n
    return count, payload, wire


__all__ = ["add_parsers", "consume_all", "run_consume", "run_produce"]
