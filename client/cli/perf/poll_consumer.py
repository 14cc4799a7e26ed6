"""``rill perf consumer-api|e2e``: the poll() consumer's throughput and end-to-end latency.

- ``consumer-api`` appends ``--messages`` messages of ``--message-size`` bytes to a
  topic of ``--partitions`` partitions (pipelined acknowledged produces, as ``rill perf
  produce`` sends them), then, ``--runs`` times, a consumer joins a fresh group
  (``group.id`` with a random run id), seeks each partition it is assigned to where
  the new messages start (in ``on_assign``), and polls until it has them all, adding
  up their payload sizes as a minimal "processing" (as Kafka's consumer perf tool
  does). The figure is messages/s from the end of the join (the assignment) to the last
  message; the join time is reported beside it. Every CRC is checked (by the codec).
- ``e2e`` measures produce-to-poll latency: a producer process sends ``--rate``
  messages/s, one acknowledged single-message request each (``--producer simple``:
  a SimpleProducer; ``producer``: rill's batching Producer with ``linger.ms=0``), each
  carrying the CLOCK_MONOTONIC time just before its send; a consumer in this process
  (a group member, from the log end) polls them and records, per message, the time
  poll() returned it minus that stamp. The first ``--warmup`` messages are not
  counted. Both processes read the same system-wide monotonic clock.

Every client (the producing connection, the consumer, the e2e producer process) connects
as ``--command-config`` says (``security.protocol``, ``ssl.*``, ``sasl.*``); the e2e
producer process is given the file's settings and builds its own TLS context from them.

Each run is listed and the median is reported (text on stderr, or one JSON object on
stdout with ``--json``), with the command line.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import struct
import time
import uuid
from typing import Any

from rill.client.cli.command_config import security_of, security_settings
from rill.client.cli.common import CliError, add_broker_arguments, info, positive_float, positive_int, topic_name
from rill.client.cli.perf.broker_requests import ensure_topic, produce_frames
from rill.client.cli.perf.report import MB, percentile, report
from rill.client.blocking_connection import BrokerConnection
from rill.client.client_config import resolve
from rill.client.consumer import Consumer, TopicPartition
from rill.client.errors import error_for_code
from rill.client.protocol import requests as rq
from rill.client.producer import Producer
from rill.client.security.client_security import SECURITY_SETTINGS, ClientSecurity, from_settings
from rill.client.simple import SimpleConsumer, SimpleProducer

__all__ = ["add_parsers"]

STAMP = struct.Struct(">q")


def add_parsers(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``consumer-api`` and ``e2e`` to ``rill perf``'s subcommands."""
    api = kinds.add_parser("consumer-api", help="poll() throughput of a group member (rill.client.consumer)")
    _common(api)
    api.add_argument("--partitions", type=positive_int, default=1, metavar="N",
                     help="partitions of the topic, created if missing (default: 1); an existing topic must "
                          "have this many")
    api.add_argument("--messages", type=positive_int, default=2_000_000, metavar="N",
                     help="messages to produce and then consume, rounded up to whole batches (default: 2000000)")
    api.add_argument("--message-size", type=positive_int, default=200, metavar="BYTES")
    api.add_argument("--max-poll-records", type=positive_int, default=500, metavar="N")
    api.add_argument("--fetch-max-bytes", type=positive_int, default=1_048_576, metavar="BYTES",
                     help="fetch.max.bytes and max.partition.fetch.bytes (default: 1048576)")
    api.set_defaults(run=run_consumer_api)

    e2e = kinds.add_parser("e2e", help="produce-to-poll latency at a fixed rate")
    _common(e2e)
    e2e.add_argument("--rate", type=positive_int, default=10_000, metavar="MSG/S", help="(default: 10000)")
    e2e.add_argument("--seconds", type=positive_float, default=10.0, help="duration of each run (default: 10)")
    e2e.add_argument("--message-size", type=positive_int, default=200, metavar="BYTES")
    e2e.add_argument("--warmup", type=int, default=1000, metavar="N", help="messages not counted (default: 1000)")
    e2e.add_argument("--producer", choices=("simple", "producer"), default="simple",
                     help="simple: SimpleProducer, one acknowledged request per message; producer: rill's "
                          "Producer with linger.ms=0 (default: simple)")
    e2e.set_defaults(run=run_e2e)


def _common(parser: argparse.ArgumentParser) -> None:
    add_broker_arguments(parser)
    parser.add_argument("-t", "--topic", required=True, type=topic_name)
    parser.add_argument("--runs", type=positive_int, default=3, metavar="N", help="runs; the median is reported "
                        "(default: 3)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def _bootstrap(args: argparse.Namespace) -> str:
    host, port = args.broker
    return f"{host}:{port}"


# ---------------------------------------------------------------- consumer-api


def _produce(host: str, port: int, frames: list[bytes], requests: int, partitions: int, timeout: float,
             security: ClientSecurity | None) -> None:
    """Send ``requests`` PRODUCE_ACK frames, 16 in flight, checking every acknowledgement."""
    with BrokerConnection(host, port, timeout, security=security) as conn:
        sent = done = 0
        while done < requests:
            while sent < requests and sent - done < 16:
                conn.send(frames[sent % len(frames)])
                sent += 1
            error, acks = rq.decode_produce_ack_response(conn.read_response())
            if error or len(acks) != partitions or any(a.error for a in acks):
                raise CliError(f"produce failed: {error_for_code(error or next(a.error for a in acks if a.error))}")
            done += 1


def run_consumer_api(args: argparse.Namespace) -> int:
    host, port = args.broker
    security = security_of(args)
    with SimpleConsumer(host, port, timeout=args.timeout, security=security) as client:
        partitions = ensure_topic(client, args.topic, args.partitions)
        starts = {TopicPartition(args.topic, p): client.latest_offset(args.topic, p) for p in range(partitions)}
    batch = 50
    requests = -(-args.messages // (batch * partitions))
    total = requests * batch * partitions
    if not args.quiet:
        info(f"  producing {total:,} messages of {args.message_size} B to {args.topic} ({partitions} partition(s)) ...")
    _produce(host, port, produce_frames(args.topic, partitions, batch, args.message_size, rq.Acks.APPEND, 8),
             requests, partitions, args.timeout, security)
    runs = []
    for run in range(args.runs):
        result = _consume_once(args, starts, total)
        runs.append(result)
        if not args.quiet:
            info(f"  run {run + 1}: {result['messages_per_s']:,.0f} messages/s, join {result['join_s'] * 1000:.0f} ms")
    median = statistics.median(r["messages_per_s"] for r in runs)
    result = {"benchmark": "consumer-api", "messages": total, "message_size": args.message_size,
              "partitions": partitions, "max_poll_records": args.max_poll_records,
              "fetch_max_bytes": args.fetch_max_bytes, "runs": runs, "messages_per_s": median,
              "mb_per_s": median * args.message_size / MB}
    report(args, result, [
        f"rill perf consumer-api: {total:,} messages of {args.message_size} B from {partitions} partition(s) "
        f"through poll() as a group member, {args.runs} run(s)",
        f"  median {median:,.0f} messages/s ({result['mb_per_s']:.1f} MB/s of payload); runs: "
        + ", ".join(f"{r['messages_per_s']:,.0f}" for r in runs),
        f"  max.poll.records {args.max_poll_records}, fetch.max.bytes {args.fetch_max_bytes}; figures from the end of "
        f"the join to the last message (joins took "
        + ", ".join(f"{r['join_s'] * 1000:.0f}" for r in runs) + " ms)",
    ])
    return 0


def _consume_once(args: argparse.Namespace, starts: dict[TopicPartition, int], total: int) -> dict[str, Any]:
    assigned_at: list[float] = []

    def on_assign(partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            consumer.seek(tp.topic, tp.partition, starts[tp])
        if len(partitions) == len(starts):
            assigned_at.append(time.perf_counter())

    consumer = Consumer(config=security_settings(args), bootstrap_servers=_bootstrap(args),
                        group_id=f"perf-consumer-{uuid.uuid4().hex[:12]}", client_id="rill-perf",
                        enable_auto_commit=False, max_poll_records=args.max_poll_records,
                        fetch_max_bytes=args.fetch_max_bytes, max_partition_fetch_bytes=args.fetch_max_bytes,
                        request_timeout_ms=int(args.timeout * 1000), on_assign=on_assign)
    try:
        consumer.add_topic(args.topic)
        started = time.perf_counter()
        count = payload = 0
        deadline = time.monotonic() + 60 + total / 100_000
        while count < total:
            batch = consumer.poll(1.0)
            count += len(batch)
            for message in batch:
                payload += len(message.value)
            if time.monotonic() > deadline:
                raise CliError(f"only {count:,} of {total:,} messages arrived in time")
        finished = time.perf_counter()
    finally:
        consumer.close()
    if not assigned_at:
        raise CliError("the consumer was never assigned every partition")
    elapsed = finished - assigned_at[0]
    return {"messages": count, "payload_bytes": payload, "seconds": elapsed, "messages_per_s": count / elapsed,
            "join_s": assigned_at[0] - started}


# ---------------------------------------------------------------- e2e


def _producer_main(host: str, port: int, topic: str, rate: int, count: int, size: int, kind: str,
                   settings: dict[str, Any], start: Any, done: Any) -> None:  # pragma: no cover - child process
    """Send ``count`` stamped messages at ``rate``/s once ``start`` is set (a child process), connecting
    with the security ``settings`` (``--command-config``'s, unparsed: an SSLContext does not pickle)."""
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))  # quiet child
    padding = b"\0" * max(0, size - STAMP.size)
    if kind == "producer":
        with Producer(settings, bootstrap_servers=f"{host}:{port}", linger_ms=0) as producer:
            producer.send(topic, b"warm-up", partition=0).wait(30)  # metadata and connection before the clock
            start.wait()
            began = time.monotonic()
            for i in range(count):
                _pace(began, i, rate)
                producer.send(topic, STAMP.pack(time.monotonic_ns()) + padding, partition=0)
            producer.flush()
    else:
        security = from_settings(resolve(SECURITY_SETTINGS, settings, {}))
        with SimpleProducer(host, port, security=security) as simple:
            simple.connect()
            start.wait()
            began = time.monotonic()
            for i in range(count):
                _pace(began, i, rate)
                simple.send(topic, [STAMP.pack(time.monotonic_ns()) + padding], 0)
    done.set()


def _pace(began: float, i: int, rate: int) -> None:  # pragma: no cover - child process
    delay = began + i / rate - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def run_e2e(args: argparse.Namespace) -> int:
    host, port = args.broker
    with SimpleConsumer(host, port, timeout=args.timeout, security=security_of(args)) as client:
        ensure_topic(client, args.topic, None)
    count = int(args.rate * args.seconds)
    if args.message_size < STAMP.size:
        raise CliError(f"--message-size must be at least {STAMP.size} (the timestamp)")
    if count <= args.warmup:
        raise CliError(f"--rate x --seconds ({count}) must exceed --warmup ({args.warmup})")
    runs = []
    for run in range(args.runs):
        result = _e2e_once(args, host, port, count)
        runs.append(result)
        if not args.quiet:
            info(f"  run {run + 1}: p50 {result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.2f} ms, "
                 f"max {result['max_ms']:.2f} ms, achieved {result['achieved_rate']:,.0f} msg/s")
    med = {k: statistics.median(r[k] for r in runs) for k in ("p50_ms", "p99_ms", "p999_ms", "max_ms")}
    result = {"benchmark": "e2e", "rate": args.rate, "seconds": args.seconds, "message_size": args.message_size,
              "producer": args.producer, "warmup": args.warmup, "runs": runs, **med}
    report(args, result, [
        f"rill perf e2e: produce-to-poll latency of {args.message_size} B messages at {args.rate:,} msg/s for "
        f"{args.seconds:g} s ({_producer_name(args.producer)}), {args.runs} run(s)",
        f"  median of runs: p50 {med['p50_ms']:.2f} ms, p99 {med['p99_ms']:.2f} ms, p999 {med['p999_ms']:.2f} ms, "
        f"max {med['max_ms']:.2f} ms",
        "  runs (p50/p99 ms): " + ", ".join(f"{r['p50_ms']:.2f}/{r['p99_ms']:.2f}" for r in runs),
    ])
    return 0


def _producer_name(kind: str) -> str:
    if kind == "producer":
        return "rill's Producer, linger.ms=0, acks after append"
    return "SimpleProducer, one acknowledged request per message"


def _e2e_once(args: argparse.Namespace, host: str, port: int, count: int) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")  # no fork: the consumer's gRPC channels must not be inherited
    start, done = ctx.Event(), ctx.Event()
    producer = ctx.Process(target=_producer_main, name="rill-perf-e2e-producer", daemon=True,
                           args=(host, port, args.topic, args.rate, count, args.message_size, args.producer,
                                 security_settings(args), start, done))
    producer.start()
    consumer = Consumer(config=security_settings(args), bootstrap_servers=f"{host}:{port}",
                        group_id=f"perf-e2e-{uuid.uuid4().hex[:12]}", client_id="rill-perf",
                        auto_offset_reset="latest", enable_auto_commit=False,
                        request_timeout_ms=int(args.timeout * 1000))
    samples: list[int] = []
    try:
        consumer.add_topic(args.topic)
        deadline = time.monotonic() + 30
        while not consumer.assignment() or any(_position_unknown(consumer, tp) for tp in consumer.assignment()):
            consumer.poll(0.05)
            if time.monotonic() > deadline:
                raise CliError("the consumer did not join its group in 30 s")
        start.set()
        received = 0
        began = time.monotonic()
        limit = began + args.seconds * 2 + 30
        while received < count:
            batch = consumer.poll(0.5)
            now = time.monotonic_ns()
            for message in batch:
                if len(message.value) < STAMP.size:
                    continue  # the Producer's warm-up message
                received += 1
                if received > args.warmup:
                    samples.append(now - STAMP.unpack_from(message.value)[0])
            if time.monotonic() > limit:
                raise CliError(f"only {received:,} of {count:,} messages arrived in time")
        elapsed = time.monotonic() - began
    finally:
        consumer.close()
        producer.join(timeout=30)
        if producer.is_alive():
            producer.terminate()
    samples.sort()
    ms = {f"{name}_ms": percentile(samples, q) / 1e6 for name, q in (("p50", 0.5), ("p99", 0.99), ("p999", 0.999))}
    return {"messages": len(samples), "achieved_rate": count / elapsed, "max_ms": samples[-1] / 1e6,
            "mean_ms": sum(samples) / len(samples) / 1e6, **ms}


def _position_unknown(consumer: Consumer, tp: TopicPartition) -> bool:
    try:
        consumer.position(tp)
    except Exception:  # noqa: BLE001 - not assigned yet, or the lookup failed: poll again
        return True
    return False
