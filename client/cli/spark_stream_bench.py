"""``rill spark bench-stream``: a streaming query over a topic fed at a steady rate.

A child process produces ``--rate`` messages per second (rill's Producer, unkeyed, so
spread over the partitions); the first ``--warmup`` seconds after the query's first
rows are not measured; a Structured Streaming
query reads the topic through the ``rill`` source with a processing-time trigger and a
``foreachBatch`` sink that counts each micro-batch's rows and the quantiles of their
``timestamp`` (the broker's append time). After the sink's action returns, a row's
latency is then minus its append time: produce-to-processed, Spark's scheduling and
the micro-batch wait included. With ``--rate 0`` the child first fills a backlog of
``--backlog`` messages and the query drains it in micro-batches of ``--max-bytes`` (the
throughput a query sustains).

Printed: records per second over the measured micro-batches, micro-batch duration
(Spark's ``triggerExecution``), and latency quantiles (median over micro-batches of
their p50, the largest p99, the largest max).
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
from typing import Any

from rill.client.cli.common import CliError, add_broker_arguments, command_line, non_negative_int, positive_int
from rill.client.cli.common import topic_name
from rill.client.cli.perf.broker_requests import ensure_topic


def add_parser(actions: argparse._SubParsersAction[argparse.ArgumentParser], master: str) -> None:
    """Add ``bench-stream`` to ``rill spark``'s actions."""
    p = actions.add_parser(
        "bench-stream", help="benchmark: a streaming query at a steady produce rate (records/s, latency)",
        description="Produce at --rate msg/s and run a streaming query over the topic; print records per "
                    "second, micro-batch durations and produce-to-processed latency. --rate 0 measures how "
                    "fast a query drains a --backlog instead.")
    add_broker_arguments(p)
    p.add_argument("-t", "--topic", required=True, type=topic_name, help="the topic (created if missing)")
    p.add_argument("--partitions", type=positive_int, default=4, help="partitions if it is created (default 4)")
    p.add_argument("--rate", type=non_negative_int, default=50_000, help="messages per second (0: drain a backlog)")
    p.add_argument("--message-size", type=positive_int, default=200)
    p.add_argument("--seconds", type=positive_int, default=30, help="measured time (default 30)")
    p.add_argument("--warmup", type=non_negative_int, default=10, help="seconds not measured (default 10)")
    p.add_argument("--trigger-ms", type=non_negative_int, default=1000,
                   help="processing-time trigger (default 1000; 0: back to back)")
    p.add_argument("--backlog", type=positive_int, default=5_000_000, help="messages first produced with --rate 0")
    p.add_argument("--max-bytes", type=positive_int, default=None, metavar="BYTES",
                   help="maxBytesPerTrigger: bytes per micro-batch (default: no limit; 64 MiB with --rate 0)")
    p.add_argument("--master", default=master)
    p.set_defaults(run=run)


def _produce(host: str, port: int, topic: str, rate: int, count: int, size: int,
             ready: Any, start: Any, stop: Any) -> None:  # pragma: no cover - runs in a child process
    """Send ``count`` messages at ``rate``/s (0: at once) once ``start`` is set, or until ``stop`` is."""
    import logging

    import structlog

    from rill.client.producer import Producer

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    value = b"s" * size
    with Producer(bootstrap_servers=f"{host}:{port}", linger_ms=5) as producer:
        producer.send(topic, value).wait(30)  # metadata and connections before the clock
        ready.set()
        start.wait()
        began = time.monotonic()
        for i in range(count):
            if rate and i % 100 == 0:
                if stop.is_set():
                    break
                delay = began + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            producer.send(topic, value)
        producer.flush()


class Sink:
    """The foreachBatch function: one stats row per micro-batch, stamped when its action returned."""

    def __init__(self) -> None:
        self.batches: list[dict[str, float]] = []
        self.stopping = False  # set before query.stop(): later batches return at once
        self.busy = False

    def quiesce(self, timeout: float) -> None:
        """Let a running micro-batch finish before the query stops: stopping a query interrupts a
        foreachBatch inside a Spark action, and Spark then fails on the long Py4J error's text
        (a java.util.regex StackOverflowError in the stream thread, SPARK-39218/48717)."""
        self.stopping = True
        deadline = time.monotonic() + timeout
        while self.busy and time.monotonic() < deadline:
            time.sleep(0.05)

    def __call__(self, df: Any, batch_id: int) -> None:
        self.busy = True  # before looking at stopping: quiesce() sets stopping, then waits while busy
        try:
            if not self.stopping:
                self._measure(df, batch_id)
        finally:
            self.busy = False

    def _measure(self, df: Any, batch_id: int) -> None:
        row = df.selectExpr("count(*) AS n", "min(unix_micros(timestamp)) AS lo",
                            "percentile_approx(unix_micros(timestamp), array(0.01, 0.5)) AS q").first()
        done_us = time.time() * 1e6
        if row.n:
            self.batches.append({"id": batch_id, "rows": row.n, "done": done_us / 1e6,
                                 "p50_ms": (done_us - row.q[1]) / 1e3, "p99_ms": (done_us - row.q[0]) / 1e3,
                                 "max_ms": (done_us - row.lo) / 1e3})


def run(args: argparse.Namespace) -> int:
    from rill.client.simple import SimpleConsumer
    from rill.client.spark import spark_session

    host, port = args.broker
    with SimpleConsumer(host, port, timeout=args.timeout) as client:
        ensure_topic(client, args.topic, args.partitions)
    ctx = multiprocessing.get_context("spawn")
    ready, start, stop = ctx.Event(), ctx.Event(), ctx.Event()
    count = args.backlog if args.rate == 0 else args.rate * (args.warmup + args.seconds + 600)  # until stopped
    child = ctx.Process(target=_produce, name="rill-bench-stream-producer", daemon=True,
                        args=(host, port, args.topic, args.rate, count, args.message_size, ready, start, stop))
    child.start()
    spark = spark_session(args.master, "rill spark bench-stream")
    spark.sparkContext.setLogLevel("ERROR")
    if not ready.wait(60):
        raise CliError("the producer did not start")
    reader = (spark.readStream.format("rill").option("bootstrap", f"{host}:{port}").option("subscribe", args.topic)
              .option("startingOffsets", "latest"))
    max_bytes = args.max_bytes or (64 * 2**20 if args.rate == 0 else None)
    if args.rate == 0:
        start.set()
        child.join()  # the backlog is complete before the query starts; the query reads it all
        reader = reader.option("startingOffsets", "earliest")
    if max_bytes:
        reader = reader.option("maxBytesPerTrigger", str(max_bytes))
    sink = Sink()
    writer = reader.load().writeStream.foreachBatch(sink)
    writer = writer.trigger(processingTime=f"{args.trigger_ms} milliseconds") if args.trigger_ms else writer
    query = writer.start()
    try:
        began = time.time()
        start.set()
        while not sink.batches and time.time() < began + 300:  # the warm-up starts at the first rows processed
            time.sleep(0.05)
        measure_from = time.time() + args.warmup
        deadline = measure_from + args.seconds if args.rate else began + 3600
        while time.time() < deadline:
            time.sleep(0.2)
            if args.rate == 0 and sum(b["rows"] for b in sink.batches) >= count:
                break
        progress = list(query.recentProgress)
    finally:
        stop.set()
        sink.quiesce(60)
        query.stop()
        child.join(timeout=30)
        if child.is_alive():
            child.terminate()
    return _report(args, sink.batches, progress, measure_from if args.rate else began)


def _report(args: argparse.Namespace, batches: list[dict[str, float]], progress: list[Any], since: float) -> int:
    measured = [b for b in batches if b["done"] >= since]
    if len(measured) < 2:
        raise CliError(f"only {len(measured)} micro-batches finished in the measured time")
    # steady state: the rows of the batches after the first, over the time between their ends
    rows, seconds = sum(b["rows"] for b in measured[1:]), measured[-1]["done"] - measured[0]["done"]
    ids = {b["id"] for b in measured}
    durations = [p["durationMs"]["triggerExecution"] for p in (_as_dict(p) for p in progress)
                 if p.get("batchId") in ids and p.get("numInputRows")]
    what = f"{args.rate:,} msg/s" if args.rate else f"a backlog of {args.backlog:,} messages"
    print(f"rill spark bench-stream: {what} of {args.message_size} B, trigger {args.trigger_ms} ms, "
          f"{args.master}", file=sys.stderr)
    print(f"  {rows / seconds:,.0f} records/s: {rows:,} records in {len(measured) - 1} micro-batches after the "
          f"first ({seconds:.1f} s)", file=sys.stderr)
    if not args.rate:
        total = sum(b["rows"] for b in measured)
        print(f"  backlog drained at {total / (measured[-1]['done'] - since):,.0f} records/s from the query's "
              f"start ({total:,} records, query start-up included)", file=sys.stderr)
    if durations:
        print(f"  micro-batch duration: median {statistics.median(durations):,.0f} ms, max {max(durations):,.0f} ms",
              file=sys.stderr)
    print(f"  latency (append to processed): p50 {statistics.median(b['p50_ms'] for b in measured):,.0f} ms, "
          f"p99 {max(b['p99_ms'] for b in measured):,.0f} ms, max {max(b['max_ms'] for b in measured):,.0f} ms",
          file=sys.stderr)
    print(f"  command: {command_line(args.argv)}", file=sys.stderr)
    return 0


def _as_dict(progress: Any) -> dict[str, Any]:
    if isinstance(progress, dict):
        return progress
    import json

    return dict(json.loads(progress.json))
