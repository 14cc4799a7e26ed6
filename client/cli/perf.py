"""``rill perf``: broker benchmarks (produce, consume, latency) and a CRC micro-benchmark.

- ``produce`` measures broker ingest: pipelined PRODUCE_ACK requests, each carrying
  ``--batch`` messages for every partition of the topic, ``--inflight`` of them
  outstanding per connection. The request frames are encoded before the clock starts
  (a small rotating pool, as Kafka's perf tools reuse payloads), so CRC and encoding
  are not on the client's clock; every response is checked for errors.
- ``consume`` reads every partition from its earliest offset to the end offset seen
  at the start, one FETCH per partition in flight (the next fetch of a partition is
  sent before the previous response is decoded), and decodes and CRC-checks every
  message.
- ``latency`` sends one acknowledged single-message request at a time and reports
  percentiles of the round trip.
- ``crc`` compares crcmod's CRC-32 with zlib's on 200 B and 10 KB payloads.
- ``commits``, ``heartbeats`` and ``rebalance`` measure the gRPC group coordinator
  (rill.client.cli.perf_groups).
- ``consumer-api`` and ``e2e`` measure the poll() consumer (rill.client.cli.perf_consumer).
- ``producer-api`` measures the Producer API, send() and send_many() (rill.client.cli.perf_producer).
- ``commit-modes`` and ``rebalance-modes`` compare the native coordinator with ZooKeeper (0.7)
  mode in one run (rill.client.cli.perf_modes).
- ``connections``, ``partitions`` and ``scrub`` start brokers of their own and measure
  idle-connection floods, many partitions (create, stop, start) and the scrubber
  (rill.client.cli.perf_broker_limits).

Figures go to stderr as text, or to stdout as one JSON object with ``--json``. Every
report ends with the command that produced it. MB means 10^6 bytes.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import threading
import time
import timeit
import zlib
from collections import deque
from collections.abc import Callable
from typing import Any

from rill.client.cli.common import (CliError, add_broker_arguments, command_line, info, positive_float,
                                    positive_int, topic_name, unknown_topic)
from rill.client.connection import BrokerConnection
from rill.client.errors import UnknownTopic, error_for_code
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import LENGTH, decode_message_set, encode_message_set
from rill.client.simple import DEFAULT_FETCH_SIZE_LIMIT, SimpleConsumer

ACKS = {"append": rq.Acks.APPEND, "fsync": rq.Acks.FSYNC}
PROGRESS_INTERVAL = 5.0
MB = 1_000_000


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("perf", help="benchmarks: produce, consume, latency, crc, commits, heartbeats, rebalance, "
                                              "consumer-api, e2e, producer-api, commit-modes, rebalance-modes, "
                                              "connections, large-requests, partitions, scrub",
                              description="Benchmarks. Each prints its figures and the command that produced them.")
    kinds = p.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)

    produce = kinds.add_parser("produce", help="broker ingest with pipelined acknowledged produces")
    _common(produce)
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
    _common(consume)
    consume.add_argument("--fetch-size", type=positive_int, default=1_048_576, metavar="BYTES")
    consume.set_defaults(run=run_consume)

    latency = kinds.add_parser("latency", help="round trip of single-message acknowledged produces")
    _common(latency)
    latency.add_argument("--messages", type=positive_int, default=10_000, metavar="N")
    latency.add_argument("--message-size", type=positive_int, default=200, metavar="BYTES")
    latency.add_argument("--partition", type=int, default=0)
    latency.add_argument("--acks", choices=list(ACKS), default="append")
    latency.add_argument("--warmup", type=int, default=100, metavar="N", help="sends not measured (default: 100)")
    latency.set_defaults(run=run_latency)

    crc = kinds.add_parser("crc", help="crcmod vs zlib CRC-32 throughput")
    crc.add_argument("--seconds", type=positive_float, default=0.3,
                     help="minimum time per measurement; the best of 3 is kept (default: 0.3)")
    crc.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    crc.set_defaults(run=run_crc)

    from rill.client.cli import perf_groups  # it imports this module (report, percentile)
    from rill.client.cli import perf_producer  # it imports this module (report, ensure_topic)

    perf_groups.add_parsers(kinds)
    perf_producer.add_parsers(kinds)

    from rill.client.cli import perf_consumer  # it imports this module too

    perf_consumer.add_parsers(kinds)

    from rill.client.cli import perf_modes  # it imports this module too

    perf_modes.add_parsers(kinds)

    from rill.client.cli import perf_broker_limits  # it imports this module too

    perf_broker_limits.add_parsers(kinds)


def _common(parser: argparse.ArgumentParser) -> None:
    add_broker_arguments(parser)
    parser.add_argument("-t", "--topic", required=True, type=topic_name)
    parser.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def report(args: argparse.Namespace, result: dict[str, Any], lines: list[str]) -> None:
    """Print the figures (text on stderr, or JSON on stdout) and the command line."""
    result["command"] = command_line(args.argv)
    if args.json:
        print(json.dumps(result, sort_keys=True))
        return
    for line in lines:
        info(line)
    info(f"  command: {result['command']}")


# ---------------------------------------------------------------- produce


def ensure_topic(client: SimpleConsumer, topic: str, partitions: int | None) -> int:
    """The topic's partition count, creating it with ``partitions`` (default 1) if missing."""
    try:
        count = client.partitions_for(topic)
    except UnknownTopic:
        return client.create_topic(topic, partitions or 1)
    if partitions is not None and partitions != count:
        raise CliError(f"topic {topic!r} exists with {count} partitions, not {partitions}: "
                       "choose another --topic or drop --partitions")
    return count


def produce_frames(topic: str, partitions: int, batch: int, message_size: int, acks: int, pool: int,
                   seed: int = 7) -> list[bytes]:
    """``pool`` PRODUCE_ACK frames, each with ``batch`` random messages for every partition."""
    rng = random.Random(seed)
    frames = []
    for _ in range(pool):
        produces = [rq.ProduceRequest(topic, p, encode_message_set([rng.randbytes(message_size) for _ in range(batch)]))
                    for p in range(partitions)]
        frames.append(rq.encode_produce_ack(produces, acks))
    return frames


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
                raise CliError(f"produce request {self.done} failed: {_ack_errors(error, acks)}")
            self.done += 1
            if sent < total:
                frame = frames[sent % pool]
                conn.send(frame)
                self.wire_bytes += len(frame)
                sent += 1


def _ack_errors(error: int, acks: list[rq.PartitionAck]) -> str:
    if error:
        return str(error_for_code(error))
    failed = [f"partition {a.partition}: {error_for_code(a.error)}" for a in acks if a.error]
    return "; ".join(failed) or f"{len(acks)} acknowledgements"


def run_produce(args: argparse.Namespace) -> int:
    host, port = args.broker
    with SimpleConsumer(host, port, timeout=args.timeout) as client:
        partitions = ensure_topic(client, args.topic, args.partitions)
    per_request = args.batch * partitions
    requests = math.ceil(args.messages / per_request)
    frames = produce_frames(args.topic, partitions, args.batch, args.message_size, ACKS[args.acks],
                            min(args.pool, requests))
    connections = min(args.connections, requests)
    shares = [requests // connections + (1 if i < requests % connections else 0) for i in range(connections)]
    conns = [BrokerConnection(host, port, args.timeout) for _ in range(connections)]
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


# ---------------------------------------------------------------- consume


def run_consume(args: argparse.Namespace) -> int:
    host, port = args.broker
    with SimpleConsumer(host, port, timeout=args.timeout) as client:
        try:
            partitions = client.partitions_for(args.topic)
        except UnknownTopic:
            raise unknown_topic(args.topic) from None
        starts = {p: client.earliest_offset(args.topic, p) for p in range(partitions)}
        ends = {p: client.latest_offset(args.topic, p) for p in range(partitions)}
    with BrokerConnection(host, port, args.timeout, max_response_size=DEFAULT_FETCH_SIZE_LIMIT + 64) as conn:
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


# ---------------------------------------------------------------- latency


def percentile(sorted_samples: list[int], q: float) -> int:
    """Nearest-rank percentile (q in 0..1) of an ascending list."""
    if not sorted_samples:
        raise ValueError("no samples")
    rank = max(1, math.ceil(q * len(sorted_samples)))
    return sorted_samples[min(rank, len(sorted_samples)) - 1]


def run_latency(args: argparse.Namespace) -> int:
    host, port = args.broker
    with SimpleConsumer(host, port, timeout=args.timeout) as client:
        partitions = ensure_topic(client, args.topic, None)
    if not 0 <= args.partition < partitions:
        raise CliError(f"topic {args.topic!r} has {partitions} partition(s): use --partition 0..{partitions - 1}")
    rng = random.Random(11)
    frames = [rq.encode_produce_ack([rq.ProduceRequest(args.topic, args.partition,
                                                       encode_message_set([rng.randbytes(args.message_size)]))],
                                    ACKS[args.acks]) for _ in range(16)]
    samples: list[int] = []
    with BrokerConnection(host, port, args.timeout) as conn:
        for i in range(args.warmup + args.messages):
            t0 = time.perf_counter_ns()
            body = conn.request(frames[i % len(frames)])
            t1 = time.perf_counter_ns()
            error, acks = rq.decode_produce_ack_response(body)
            if error or len(acks) != 1 or acks[0].error:
                raise CliError(f"produce {i} failed: {_ack_errors(error, acks)}")
            if i >= args.warmup:
                samples.append(t1 - t0)
    samples.sort()
    us = {name: percentile(samples, q) / 1000 for name, q in (("p50", 0.5), ("p99", 0.99), ("p999", 0.999))}
    result = {"benchmark": "latency", "messages": len(samples), "message_size": args.message_size,
              "acks": args.acks, "min_us": samples[0] / 1000, "max_us": samples[-1] / 1000,
              "mean_us": sum(samples) / len(samples) / 1000, **{f"{k}_us": v for k, v in us.items()}}
    report(args, result, [
        f"rill perf latency: {len(samples):,} acknowledged single-message produces of {args.message_size} B "
        f"(acks={args.acks}), one at a time",
        f"  p50 {us['p50']:.0f} us, p99 {us['p99']:.0f} us, p999 {us['p999']:.0f} us "
        f"(min {result['min_us']:.0f}, mean {result['mean_us']:.0f}, max {result['max_us']:.0f} us)",
    ])
    return 0


# ---------------------------------------------------------------- crc


def throughput(func: Callable[[bytes], int], data: bytes, seconds: float) -> float:
    """Bytes per second of ``func(data)``: the best of 3 runs of at least ``seconds`` each."""
    timer = timeit.Timer("f(d)", globals={"f": func, "d": data})
    number = 1
    while True:  # calibrate like timeit.autorange, to the requested time
        elapsed = timer.timeit(number)
        if elapsed >= seconds:
            break
        number = max(number * 2, int(number * seconds / max(elapsed, 1e-9) * 1.1))
    best = min([elapsed, *timer.repeat(repeat=2, number=number)])
    return len(data) * number / best


def crcmod_function() -> tuple[Callable[[bytes], int], bool]:
    """crcmod's CRC-32 function (what rill.client.crc.crcmod_crc32 calls), built once,
    and whether crcmod's C extension is in use."""
    import importlib

    import crcmod.predefined

    func = crcmod.predefined.mkCrcFun("crc-32")
    return func, bool(getattr(importlib.import_module("crcmod.crcmod"), "_usingExtension", False))


def run_crc(args: argparse.Namespace) -> int:
    crcmod_crc, extension = crcmod_function()
    rng = random.Random(3)
    cases = []
    lines = [f"rill perf crc: CRC-32 throughput, best of 3 runs of >= {args.seconds} s "
             f"(crcmod C extension: {'yes' if extension else 'no'})"]
    for size in (200, 10 * 1024):
        data = rng.randbytes(size)
        if crcmod_crc(data) != zlib.crc32(data):
            raise CliError("crcmod and zlib disagree")  # pragma: no cover - the tests check this too
        crcmod_rate = throughput(crcmod_crc, data, args.seconds)
        zlib_rate = throughput(zlib.crc32, data, args.seconds)
        cases.append({"size": size, "crcmod_mb_per_s": crcmod_rate / MB, "zlib_mb_per_s": zlib_rate / MB,
                      "ratio": zlib_rate / crcmod_rate})
        lines.append(f"  {size:>6} B: crcmod {crcmod_rate / MB:9.1f} MB/s ({crcmod_rate / size:12,.0f} calls/s)   "
                     f"zlib {zlib_rate / MB:9.1f} MB/s ({zlib_rate / size:12,.0f} calls/s)   "
                     f"zlib/crcmod {zlib_rate / crcmod_rate:.1f}x")
    report(args, {"benchmark": "crc", "crcmod_extension": extension, "cases": cases}, lines)
    return 0


__all__ = ["add_parser", "consume_all", "ensure_topic", "percentile", "produce_frames", "throughput"]
