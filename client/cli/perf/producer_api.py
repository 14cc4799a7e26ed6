"""``rill perf producer-api``: throughput of the Producer API (rill.client.producer).

Unlike ``rill perf produce`` (pre-encoded requests, which measures the broker), this
drives the real client: every message goes through ``Producer.send`` (one call per
message) or ``Producer.send_many`` (``--per-call`` messages per call), is partitioned,
queued, batched by the send thread, encoded, sent and acknowledged. The payloads are
``--message-size`` random bytes from a pool of distinct values made before the clock
starts, so generating data is not timed; serialization is (bytes pass through).

The clock runs from the first send to the end of ``flush()``, when every message is
acknowledged. Checks: every ``send_many`` response, one ``send`` response in 1,000, and
the broker's end offsets, which must have grown by exactly the encoded size of the
messages sent (uncompressed only), so every message is known to be in the log.
Figures also give the client process's CPU time (both threads, user + system) as a
share of one core.
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from rill.client.cli.common import (CliError, add_broker_arguments, info, non_negative_int, positive_int,
                                    topic_name)
from rill.client.cli.perf.broker_requests import ensure_topic
from rill.client.cli.perf.report import MB, PROGRESS_INTERVAL, report
from rill.client.producer import Producer, SendResponse
from rill.client.producer.future import MESSAGE_OVERHEAD
from rill.client.simple import SimpleConsumer

POOL = 1000  # distinct payloads, sent in rotation
MODES = {"single": ("send",), "many": ("send_many",), "both": ("send", "send_many")}


def add_parsers(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``producer-api`` to ``rill perf``'s subcommands."""
    p = kinds.add_parser("producer-api", help="Producer API throughput: send() and send_many()",
                         description="Throughput of the Producer API, one message per send() call and "
                                     "--per-call messages per send_many() call, all acknowledged.")
    add_broker_arguments(p)
    p.add_argument("-t", "--topic", required=True, type=topic_name)
    p.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.add_argument("--partitions", type=positive_int, default=None, metavar="N",
                   help="partitions to create the topic with if it does not exist (default: 1); "
                        "an existing topic must have this many")
    p.add_argument("--mode", choices=list(MODES), default="both",
                   help="single: send(), many: send_many(), both (default)")
    p.add_argument("--messages", type=positive_int, default=2_000_000, metavar="N",
                   help="messages per mode (default: 2000000)")
    p.add_argument("--message-size", type=positive_int, default=200, metavar="BYTES")
    p.add_argument("--per-call", type=positive_int, default=1000, metavar="N",
                   help="messages per send_many() call (default: 1000)")
    p.add_argument("--batch-size", type=positive_int, default=None, metavar="BYTES",
                   help="the producer's batch.size (default: the producer's default)")
    p.add_argument("--linger-ms", type=non_negative_int, default=None, metavar="MS",
                   help="the producer's linger.ms (default: the producer's default)")
    p.add_argument("--acks", choices=["none", "append", "fsync", "all"], default="append")
    p.add_argument("--compression", choices=["none", "gzip"], default="none")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="settings",
                   help="any other producer setting, e.g. --set max.in.flight.requests.per.connection=1")
    p.set_defaults(run=run_producer_api)


def producer_settings(args: argparse.Namespace) -> dict[str, Any]:
    host, port = args.broker
    settings: dict[str, Any] = {"bootstrap.servers": f"{host}:{port}", "client.id": "rill-perf",
                                "acks": args.acks, "compression.type": args.compression,
                                "request.timeout.ms": int(args.timeout * 1000)}
    if args.batch_size is not None:
        settings["batch.size"] = args.batch_size
    if args.linger_ms is not None:
        settings["linger.ms"] = args.linger_ms
    for item in args.settings:
        key, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--set {item!r}: expected KEY=VALUE")
        settings[key.strip()] = int(value) if value.strip().isdigit() else value.strip()
    return settings


def end_offsets(client: SimpleConsumer, topic: str, partitions: int) -> list[int]:
    """Each partition's end, asked of the broker that holds (leads) it, in the partition's number there."""
    described = client.metadata([topic])
    placement = described.topics[0]
    addresses = {b.broker_id: (b.host, b.port) for b in described.brokers}
    ends = []
    for p in range(partitions):
        address = addresses.get(placement.leaders[p]) if p < placement.partitions else None
        if address is None or address == (client.host, client.port):
            ends.append(client.latest_offset(topic, placement.broker_partition(p) if address else p))
            continue
        with SimpleConsumer(*address, timeout=client.timeout) as leader:
            ends.append(leader.latest_offset(topic, placement.broker_partition(p)))
    return ends


def run_producer_api(args: argparse.Namespace) -> int:
    host, port = args.broker
    with SimpleConsumer(host, port, timeout=args.timeout) as client:
        partitions = ensure_topic(client, args.topic, args.partitions)
    rng = random.Random(5)
    pool = [rng.randbytes(args.message_size) for _ in range(POOL)]
    runs = []
    with Producer(producer_settings(args)) as producer, SimpleConsumer(host, port, timeout=args.timeout) as client:
        producer.send(args.topic, b"warm-up").get_offset(timeout=args.timeout)  # connection and metadata
        for api in MODES[args.mode]:
            before = end_offsets(client, args.topic, partitions)
            run = measure(producer, api, args, pool)
            run["verified"] = verify(client, args, partitions, before, run["messages"])
            runs.append(run)
        config = producer.config
    result = {
        "benchmark": "producer-api", "message_size": args.message_size, "partitions": partitions,
        "batch_size": config["batch.size"], "linger_ms": config["linger.ms"], "acks": config["acks"],
        "compression": config["compression.type"],
        "max_in_flight": config["max.in.flight.requests.per.connection"], "per_call": args.per_call,
        "runs": runs,
    }
    lines = [f"rill perf producer-api: {args.message_size} B messages to {partitions} partition(s), "
             f"batch.size={config['batch.size']}, linger.ms={config['linger.ms']:g}, acks={config['acks']}, "
             f"compression={config['compression.type']}"]
    for run in runs:
        calls = "1 message per call" if run["api"] == "send" else f"{args.per_call} messages per call"
        lines.append(f"  {run['api']:>9}: {run['messages']:,} messages in {run['seconds']:.2f} s: "
                     f"{run['messages_per_s']:,.0f} messages/s, {run['mb_per_s']:.1f} MB/s of payload "
                     f"({calls}; client CPU {run['client_cpu']:.0%} of a core; "
                     f"{'every message found in the log' if run['verified'] else 'log not checked'})")
    report(args, result, lines)
    return 0


def measure(producer: Producer, api: str, args: argparse.Namespace, pool: list[bytes]) -> dict[str, Any]:
    """Send ``args.messages`` messages with ``api``, flush, and return the figures."""
    topic, total = args.topic, args.messages
    checked: list[SendResponse] = []
    next_report = time.perf_counter() + PROGRESS_INTERVAL
    cpu, started = time.process_time(), time.perf_counter()
    sent = 0
    if api == "send":
        send = producer.send
        while sent < total:
            chunk = pool[:min(POOL, total - sent)]
            for payload in chunk:
                response = send(topic, payload)
            checked.append(response)
            sent += len(chunk)
            if not args.quiet and sent % (256 * POOL) == 0 and time.perf_counter() >= next_report:
                next_report = _progress(sent, started)
    else:
        send_many = producer.send_many
        per_call = [pool[i % POOL] for i in range(args.per_call)]
        while sent < total:
            values = per_call if total - sent >= len(per_call) else per_call[:total - sent]
            checked.append(send_many(topic, values))
            sent += len(values)
            if not args.quiet and time.perf_counter() >= next_report:
                next_report = _progress(sent, started)
    producer.flush()
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu
    failed = [r.get_error() for r in checked if r.get_error() is not None]
    if failed:
        raise CliError(f"{len(failed)} of the {len(checked)} responses checked failed: {failed[0]}")
    return {"api": api, "messages": total, "seconds": elapsed, "messages_per_s": total / elapsed,
            "mb_per_s": total * args.message_size / MB / elapsed, "client_cpu_s": cpu,
            "client_cpu": cpu / elapsed, "responses_checked": len(checked)}


def _progress(sent: int, started: float) -> float:
    now = time.perf_counter()
    info(f"  ... {sent:,} messages sent, {sent / (now - started):,.0f} messages/s")
    return now + PROGRESS_INTERVAL


def verify(client: SimpleConsumer, args: argparse.Namespace, partitions: int, before: list[int],
           messages: int) -> bool:
    """Whether the partitions grew by exactly the encoded size of ``messages`` (uncompressed only).

    Raises CliError when they did not (with ``acks=none`` after waiting for the broker).
    """
    if args.compression != "none":
        return False
    expected = messages * (args.message_size + MESSAGE_OVERHEAD)
    deadline = time.monotonic() + (args.timeout if args.acks == "none" else 0)
    while True:
        grown = sum(end - start for end, start in zip(end_offsets(client, args.topic, partitions), before))
        if grown == expected:
            return True
        if time.monotonic() >= deadline:
            raise CliError(f"the log grew by {grown:,} bytes, not the {expected:,} bytes of the messages sent")
        time.sleep(0.05)


__all__ = ["add_parsers", "producer_settings", "run_producer_api"]
