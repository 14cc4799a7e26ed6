"""``rill perf connections | partitions | scrub``: what floods, many partitions and scrubbing cost a broker.

Each starts brokers of its own (rill.client.cli.spawned_broker) on fresh data
directories, because start-up and stop times, descriptors and resident memory are
what they measure:

- ``connections``: broker RSS with N idle connections, and the round trip of a new
  client's METADATA (its own connection each time) while they are open.
- ``large-requests``: broker RSS while N acknowledged produces of ``--mb`` MB each
  arrive at once (bounded by ``queued.max.request.bytes``), and afterwards; another
  client's round trip meanwhile.
- ``partitions``: for N partitions (topics of ``--per-topic`` each), the time to create
  them and the worst wait of another client asking for a log end every 10 ms
  meanwhile; descriptors and RSS; the graceful stop; a clean start; and a start after
  ``kill -9`` with one unsynced message in every partition.
- ``scrub``: the scrubber's own speed (one unthrottled pass over ``--mb`` of data),
  and ingest (``rill perf produce``) with the scrubber off and on at its default rate,
  alternating, as a ratio.

Figures go to stderr as text, or to stdout as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from rill.client.cli.common import info, positive_int
from rill.client.cli.perf.report import report
from rill.client.cli.spawned_broker import SpawnedBroker, raise_own_fd_limit
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import encode_message_set
from rill.client.simple import SimpleConsumer, SimpleProducer


def add_parsers(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    conns = kinds.add_parser("connections", help="broker RSS with N idle connections; a new client's METADATA meanwhile")
    conns.add_argument("--connections", default="1000,10000", help="comma-separated counts (default: 1000,10000)")
    conns.add_argument("--probes", type=positive_int, default=50, help="METADATA round trips measured per count")
    _common(conns)
    conns.set_defaults(run=run_connections)

    parts = kinds.add_parser("partitions", help="create, stop and start a broker with N partitions")
    parts.add_argument("--partitions", default="1000,10000,100000",
                       help="comma-separated totals (default: 1000,10000,100000)")
    parts.add_argument("--per-topic", type=positive_int, default=10_000, help="partitions per topic (default: 10000)")
    _common(parts)
    parts.set_defaults(run=run_partitions)

    large = kinds.add_parser("large-requests", help="broker RSS while several large produces arrive at once")
    large.add_argument("--requests", type=positive_int, default=6, help="concurrent requests (default: 6)")
    large.add_argument("--mb", type=positive_int, default=100, help="size of each request in MB (default: 100)")
    _common(large)
    large.set_defaults(run=run_large_requests)

    scrub = kinds.add_parser("scrub", help="scrubber speed, and ingest with the scrubber off and on")
    scrub.add_argument("--mb", type=positive_int, default=1000, help="data to scrub, in MB (default: 1000)")
    scrub.add_argument("--rounds", type=positive_int, default=3, help="ingest runs per setting (default: 3)")
    _common(scrub)
    scrub.set_defaults(run=run_scrub)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", help="where the brokers keep their data (default: a temporary directory)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def _workdir(args: argparse.Namespace) -> str:
    return tempfile.mkdtemp(prefix="rill-perf-", dir=args.dir)


def _say(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        info(text)


# ---------------------------------------------------------------- connections


def run_connections(args: argparse.Namespace) -> int:
    counts = [int(c) for c in args.connections.split(",")]
    raise_own_fd_limit()
    root = _workdir(args)
    broker = SpawnedBroker(os.path.join(root, "data"), {"max.connections": max(counts) + args.probes + 100})
    broker.start()
    rows = []
    try:
        idle_rss = broker.rss_mb()
        baseline = _metadata_ms(broker.port, args.probes)
        for count in counts:
            flood = [socket.create_connection(("127.0.0.1", broker.port)) for _ in range(count)]
            time.sleep(1.0)
            with_rss = broker.rss_mb()
            during = _metadata_ms(broker.port, args.probes)
            for sock in flood:
                sock.close()
            time.sleep(1.0)
            rows.append({"connections": count, "rss_mb": round(with_rss, 1), "rss_added_mb": round(with_rss - idle_rss, 1),
                         "rss_after_close_mb": round(broker.rss_mb(), 1),
                         "metadata_p50_ms": round(statistics.median(during), 3),
                         "metadata_max_ms": round(max(during), 3)})
            _say(args, f"{count} idle connections: RSS +{rows[-1]['rss_added_mb']} MB")
        broker.stop()
    finally:
        if broker.proc is not None and broker.proc.poll() is None:
            broker.kill9()
        shutil.rmtree(root, ignore_errors=True)
    result = {"benchmark": "connections", "idle_rss_mb": round(idle_rss, 1),
              "metadata_p50_ms_idle": round(statistics.median(baseline), 3), "rows": rows}
    report(args, result, [f"  idle broker: RSS {result['idle_rss_mb']} MB, METADATA p50 "
                          f"{result['metadata_p50_ms_idle']} ms"] + [
        f"  {r['connections']:>6} idle connections: RSS +{r['rss_added_mb']} MB ({r['rss_after_close_mb']} MB after "
        f"closing them); a new client's METADATA p50 {r['metadata_p50_ms']} ms, max {r['metadata_max_ms']} ms"
        for r in rows])
    return 0


def _metadata_ms(port: int, probes: int) -> list[float]:
    out = []
    for _ in range(probes):
        start = time.perf_counter()
        with SimpleConsumer("127.0.0.1", port, timeout=60) as client:
            client.metadata()
        out.append((time.perf_counter() - start) * 1000)
    return out


# ---------------------------------------------------------------- large requests


def run_large_requests(args: argparse.Namespace) -> int:
    root = _workdir(args)
    broker = SpawnedBroker(os.path.join(root, "data"))
    broker.start()
    try:
        time.sleep(0.5)
        idle = broker.rss_mb()
        payload = os.urandom(900_000)
        frame = rq.encode_produce_ack([rq.ProduceRequest("large", 0, encode_message_set(
            [payload] * max(1, args.mb * 1_000_000 // 900_010)))])
        peak, done = [idle], threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], broker.rss_mb())
                time.sleep(0.005)

        errors: list[int] = []
        senders = [threading.Thread(target=_send_acked, args=(broker.port, frame, errors)) for _ in range(args.requests)]
        probe, sampler = _Probe(broker.port), threading.Thread(target=sample)
        probe.start()
        sampler.start()
        start = time.monotonic()
        for thread in senders:
            thread.start()
        for thread in senders:
            thread.join()
        seconds = time.monotonic() - start
        done.set()
        probe.done.set()
        sampler.join()
        probe.join(60)
        time.sleep(0.5)
        after = broker.rss_mb()
        broker.stop()
    finally:
        if broker.proc is not None and broker.proc.poll() is None:
            broker.kill9()
        shutil.rmtree(root, ignore_errors=True)
    result = {"benchmark": "large-requests", "requests": args.requests, "request_bytes": len(frame),
              "acknowledged": errors.count(0), "seconds": round(seconds, 2), "idle_rss_mb": round(idle, 1),
              "peak_rss_added_mb": round(peak[0] - idle, 1), "rss_after_mb": round(after, 1),
              "probe_p50_ms": round(statistics.median(probe.samples), 2), "probe_max_ms": round(max(probe.samples), 2)}
    report(args, result, [
        f"  {args.requests} concurrent requests of {len(frame):,} bytes: {result['acknowledged']} acknowledged in "
        f"{result['seconds']} s; RSS {result['idle_rss_mb']} MB idle, +{result['peak_rss_added_mb']} MB at the peak, "
        f"{result['rss_after_mb']} MB after; another client's round trip meanwhile p50 {result['probe_p50_ms']} ms, "
        f"max {result['probe_max_ms']} ms"])
    return 0


def _send_acked(port: int, frame: bytes, errors: list[int]) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=600) as sock:
        sock.sendall(frame)
        (size,) = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
        _, [ack] = rq.decode_produce_ack_response(sock.recv(size, socket.MSG_WAITALL))
        errors.append(ack.error)


# ---------------------------------------------------------------- partitions


class _Probe(threading.Thread):
    """Asks for a log end every 10 ms; keeps each round trip (ms)."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.samples: list[float] = []
        self.done = threading.Event()

    def run(self) -> None:
        with SimpleConsumer("127.0.0.1", self.port, timeout=300) as client:
            while not self.done.is_set():
                start = time.perf_counter()
                client.latest_offset("probe", 0)
                self.samples.append((time.perf_counter() - start) * 1000)
                time.sleep(0.01)


def run_partitions(args: argparse.Namespace) -> int:
    rows = []
    for total in (int(c) for c in args.partitions.split(",")):
        root = _workdir(args)
        try:
            rows.append(_partitions_row(args, os.path.join(root, "data"), total))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    report(args, {"benchmark": "partitions", "rows": rows}, [
        f"  {r['partitions']:>7} partitions: created in {r['create_s']} s (another client's wait: p50 "
        f"{r['probe_p50_ms']} ms, max {r['probe_max_ms']} ms); {r['descriptors']} descriptors, RSS {r['rss_mb']} MB; "
        f"stop {r['stop_s']} s; clean start {r['clean_start_s']} s ({r['descriptors_after_start']} descriptors); "
        f"start after kill -9 {r['start_after_kill_s']} s" for r in rows])
    return 0


def _partitions_row(args: argparse.Namespace, data: str, total: int) -> dict[str, Any]:
    settings = {"max.broker.partitions": total + 10, "num.partitions.max": min(args.per_topic, total + 10)}
    broker = SpawnedBroker(data, settings)
    broker.start()
    topics = [(f"t{k}", min(args.per_topic, total - k * args.per_topic))
              for k in range((total + args.per_topic - 1) // args.per_topic)]
    try:
        with SimpleProducer("127.0.0.1", broker.port) as producer:
            producer.send("probe", [b"p"], 0)
        probe = _Probe(broker.port)
        probe.start()
        time.sleep(0.3)
        start = time.monotonic()
        with SimpleConsumer("127.0.0.1", broker.port, timeout=3600) as client:
            for topic, count in topics:
                client.create_topic(topic, count)
        create_s = time.monotonic() - start
        time.sleep(0.3)
        probe.done.set()
        probe.join(60)
        _say(args, f"{total} partitions created in {create_s:.2f} s")
        row = {"partitions": total, "create_s": round(create_s, 2),
               "probe_p50_ms": round(statistics.median(probe.samples), 2),
               "probe_max_ms": round(max(probe.samples), 2), "descriptors": broker.descriptors(),
               "rss_mb": round(broker.rss_mb(), 1)}
        _write_everywhere(broker.port, topics)
        row["stop_s"] = round(broker.stop(), 2)
        broker = SpawnedBroker(data, settings)
        row["clean_start_s"] = round(broker.start(), 2)
        row["descriptors_after_start"] = broker.descriptors()
        _write_everywhere(broker.port, topics)  # unsynced after the checkpoint written at the last stop
        time.sleep(1.5)
        broker.kill9()
        broker = SpawnedBroker(data, settings)
        row["start_after_kill_s"] = round(broker.start(), 2)
        broker.stop()
        return row
    finally:
        if broker.proc is not None and broker.proc.poll() is None:
            broker.kill9()


def _write_everywhere(port: int, topics: list[tuple[str, int]]) -> None:
    """One message in every partition, 1,000 partitions per request."""
    keys = [(topic, p) for topic, count in topics for p in range(count)]
    with SimpleProducer("127.0.0.1", port, timeout=600) as producer:
        for start in range(0, len(keys), 1000):
            producer.send_many({key: [b"m"] for key in keys[start:start + 1000]})


# ---------------------------------------------------------------- scrub


def run_scrub(args: argparse.Namespace) -> int:
    root = _workdir(args)
    data = os.path.join(root, "data")
    try:
        fill = SpawnedBroker(data, {"log.scrub.enable": "false"})
        fill.start()
        _rill(fill.port, f"perf produce -t scrubbed --partitions 4 --message-size 200 --batch 50 "
                         f"--messages {args.mb * 1_000_000 // 210}")
        fill.stop()
        speed = _scrub_speed(data)
        _say(args, f"scrubber: {speed['mb_per_s']} MB/s unthrottled")
        runs: dict[str, list[float]] = {"off": [], "on": []}
        for k in range(args.rounds):
            for setting in (("off", "on") if k % 2 == 0 else ("on", "off")):
                runs[setting].append(_ingest(data, setting == "on", f"ingest{k}{setting}"))
        off, on = statistics.median(runs["off"]), statistics.median(runs["on"])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {"benchmark": "scrub", "data_mb": args.mb, **speed, "ingest_off": runs["off"], "ingest_on": runs["on"],
              "ingest_ratio_on_off": round(on / off, 3)}
    report(args, result, [
        f"  scrubber, one unthrottled pass over {speed['bytes']:,} bytes: {speed['mb_per_s']} MB/s",
        f"  ingest with the scrubber off: {off:,.0f} msg/s, on (default rate): {on:,.0f} msg/s; "
        f"ratio on/off {result['ingest_ratio_on_off']} (runs off {[round(x) for x in runs['off']]}, "
        f"on {[round(x) for x in runs['on']]})"])
    return 0


def _scrub_speed(data: str) -> dict[str, Any]:
    broker = SpawnedBroker(data, {"log.scrub.bytes.per.second": 10**12})
    broker.start()
    try:
        deadline = time.monotonic() + 3600
        while (done := broker.event("scrub.pass_completed")) is None:
            if time.monotonic() > deadline:
                raise TimeoutError("no scrub pass completed")
            time.sleep(0.2)
    finally:
        broker.stop()
    return {"bytes": done["bytes"], "seconds": done["seconds"], "mb_per_s": round(done["bytes"] / 1e6 / done["seconds"], 1)}


def _ingest(data: str, scrubbing: bool, topic: str) -> float:
    broker = SpawnedBroker(data, {"log.scrub.enable": "true" if scrubbing else "false"})
    broker.start()
    try:
        time.sleep(0.5)  # the scrubber's pass is under way
        result = _rill(broker.port, f"perf produce -t {topic} --partitions 4 --message-size 200 --batch 50 "
                                    f"--messages 2000000")
        return float(result["messages_per_s"])
    finally:
        broker.stop()


def _rill(port: int, command: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "rill.client.cli.main", *command.split(), "-b", f"127.0.0.1:{port}",
                          "--json", "-q"], check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


__all__ = ["add_parsers"]
