"""``rill perf latency``: the round trip of acknowledged single-message produces, one at a time.

Each request is pre-encoded (a pool of 16, sent in rotation); the first ``--warmup``
round trips are not counted; percentiles are nearest-rank. The connection is made as
``--command-config`` says (TLS, SASL).
"""

from __future__ import annotations

import argparse
import random
import time

from rill.client.cli.command_config import security_of
from rill.client.cli.common import CliError, positive_int
from rill.client.cli.perf.broker_requests import ACKS, ack_errors, data_plane_arguments, ensure_topic
from rill.client.cli.perf.report import percentile, report
from rill.client.blocking_connection import BrokerConnection
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import encode_message_set
from rill.client.simple import SimpleConsumer


def add_parsers(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``latency`` to ``rill perf``'s subcommands."""
    latency = kinds.add_parser("latency", help="round trip of single-message acknowledged produces")
    data_plane_arguments(latency)
    latency.add_argument("--messages", type=positive_int, default=10_000, metavar="N")
    latency.add_argument("--message-size", type=positive_int, default=200, metavar="BYTES")
    latency.add_argument("--partition", type=int, default=0)
    latency.add_argument("--acks", choices=list(ACKS), default="append")
    latency.add_argument("--warmup", type=int, default=100, metavar="N", help="sends not measured (default: 100)")
    latency.set_defaults(run=run_latency)


def run_latency(args: argparse.Namespace) -> int:
    host, port = args.broker
    security = security_of(args)
    with SimpleConsumer(host, port, timeout=args.timeout, security=security) as client:
        partitions = ensure_topic(client, args.topic, None)
    if not 0 <= args.partition < partitions:
        raise CliError(f"topic {args.topic!r} has {partitions} partition(s): use --partition 0..{partitions - 1}")
    rng = random.Random(11)
    frames = [rq.encode_produce_ack([rq.ProduceRequest(args.topic, args.partition,
                                                       encode_message_set([rng.randbytes(args.message_size)]))],
                                    ACKS[args.acks]) for _ in range(16)]
    samples: list[int] = []
    with BrokerConnection(host, port, args.timeout, security=security) as conn:
        for i in range(args.warmup + args.messages):
            t0 = time.perf_counter_ns()
            body = conn.request(frames[i % len(frames)])
            t1 = time.perf_counter_ns()
            error, acks = rq.decode_produce_ack_response(body)
            if error or len(acks) != 1 or acks[0].error:
                raise CliError(f"produce {i} failed: {ack_errors(error, acks)}")
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


__all__ = ["add_parsers", "run_latency"]
