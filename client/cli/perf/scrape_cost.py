"""``rill perf scrape``: how long a scrape of a broker with many partitions takes, and what it stalls.

For each total of ``--partitions`` it starts a broker of its own (metrics on, a free port;
``max.broker.partitions`` and ``num.partitions.max`` raised to fit) on a fresh directory
under ``--dir``, and:

1. creates topics of ``--per-topic`` partitions (CREATE_TOPIC over the data plane);
2. appends two messages of 100 B to every partition (1,000 partitions per PRODUCE_ACK);
3. creates group ``scrape-lag`` and commits, for its first ``--group-partitions``
   partitions, the offset after the first message (one message of lag each), so the
   per-group-partition series (committed offset, lag in bytes and in seconds) exist;
4. scrapes ``/metrics`` ``--scrapes`` times, one after the other: each scrape's time from
   the request to the last byte (p50, max, the first), the broker's CPU per scrape, the
   series (samples) and the size of the text, then once gzipped (its size), and parses
   the text with prometheus-client's parser (the time, in this process);
5. measures the stall: a worker process (:mod:`.loop_probe`) sends OFFSETS requests in a
   tight loop; for ``--idle-seconds`` nothing else happens, then ``--scrapes`` scrapes run
   back to back. The report gives the probe's round trips (how many per second, p50, p99,
   max) without a scrape and during the scrapes (a round trip overlapping a scrape), and
   the scrapes' times with the probe running.

The issue's goal: a scrape of 10,000 partitions in under 1 s that does not stall the event
loop. The report says whether the scrape goal holds at each total.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

from rill.client.admin import AdminClient
from rill.client.cli.common import CliError, non_negative_int, positive_float, positive_int
from rill.client.cli.perf.metrics_scrape import Scrape, scrape, series_count
from rill.client.cli.perf.report import percentile, report
from rill.client.cli.perf.side_by_side import broker_cpu_seconds, loadavg, say
from rill.client.cli.spawned_broker import SpawnedBroker
from rill.client.simple import SimpleConsumer, SimpleProducer

__all__ = ["add_parsers"]

GROUP, PROBE_TOPIC, MESSAGE = "scrape-lag", "scrape-probe", b"m" * 100
GOAL_S = 1.0


def add_parsers(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``scrape`` to ``rill perf``'s subcommands."""
    p = kinds.add_parser("scrape", help="scrape time, series and size of /metrics with N partitions; the event "
                                        "loop's stall meanwhile")
    p.add_argument("--partitions", default="1000,10000", help="comma-separated totals (default: 1000,10000)")
    p.add_argument("--per-topic", type=positive_int, default=1000, help="partitions per topic (default: 1000)")
    p.add_argument("--group-partitions", type=non_negative_int, default=1000, metavar="N",
                   help="partitions with a committed offset of group scrape-lag (default: 1000; at most the total)")
    p.add_argument("--scrapes", type=positive_int, default=10, help="scrapes per measurement (default: 10)")
    p.add_argument("--idle-seconds", type=positive_float, default=3.0,
                   help="the probe's time without scrapes, for its baseline (default: 3)")
    p.add_argument("--dir", help="where the broker keeps its data (default: a temporary directory)")
    p.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(run=run_scrape)


def run_scrape(args: argparse.Namespace) -> int:
    try:
        totals = [int(c) for c in args.partitions.split(",") if c.strip()]
    except ValueError:
        raise CliError(f"--partitions: comma-separated counts, not {args.partitions!r}", 2) from None
    if not totals or min(totals) < 1:
        raise CliError("--partitions: positive counts", 2)
    rows = []
    load = loadavg()
    for total in totals:
        work = tempfile.mkdtemp(prefix="rill-perf-scrape-", dir=args.dir)
        try:
            rows.append(_measure(args, os.path.join(work, "data"), total))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    result = {"benchmark": "scrape", "goal_s": GOAL_S, "load_before": load, "load_after": loadavg(), "rows": rows}
    report(args, result, [line for row in rows for line in _lines(row)])
    return 0


def _measure(args: argparse.Namespace, data: str, total: int) -> dict[str, Any]:
    per_topic = min(args.per_topic, total)
    broker = SpawnedBroker(data, {"max.broker.partitions": total + 10, "num.partitions.max": per_topic})
    broker.start(600)
    try:
        row: dict[str, Any] = {"partitions": total, "per_topic": per_topic}
        row.update(_fill(broker, total, per_topic, min(args.group_partitions, total)))
        say(args, f"  {total} partitions: created in {row['create_s']} s, filled in {row['fill_s']} s")
        row.update(_scrapes(broker, args.scrapes))
        row.update(_stall(broker, args.scrapes, args.idle_seconds))
        row["broker_rss_mb"] = round(broker.rss_mb(), 1)
        row["goal_holds"] = row["scrape_ms_max"] < GOAL_S * 1000 and row["stalled_scrape_ms_max"] < GOAL_S * 1000
        broker.stop()
        return row
    finally:
        if broker.proc is not None and broker.proc.poll() is None:
            broker.kill9()


def _fill(broker: SpawnedBroker, total: int, per_topic: int, grouped: int) -> dict[str, Any]:
    """Topics totalling ``total`` partitions, two messages in each, and the group's commits (see the module)."""
    topics = [(f"scrape-{k}", min(per_topic, total - k * per_topic)) for k in range(-(-total // per_topic))]
    keys = [(topic, p) for topic, count in topics for p in range(count)]
    started = time.monotonic()
    with SimpleProducer("127.0.0.1", broker.port, timeout=600) as producer:
        with SimpleConsumer("127.0.0.1", broker.port, timeout=600) as client:
            for topic, count in topics:
                client.create_topic(topic, count)
        created = time.monotonic()
        firsts: dict[tuple[str, int], int] = {}
        for start in range(0, len(keys), 1000):
            acks = producer.send_many({key: [MESSAGE] for key in keys[start:start + 1000]})
            firsts.update((key, ack.next_offset) for key, ack in acks.items())
            producer.send_many({key: [MESSAGE] for key in keys[start:start + 1000]})
        producer.send(PROBE_TOPIC, [MESSAGE], 0)
    filled = time.monotonic()
    admin = AdminClient(f"127.0.0.1:{broker.grpc_port}", timeout=600)
    try:
        admin.create_group(GROUP)
        if grouped > 0:
            committed = admin.commit(GROUP, [(t, p, firsts[(t, p)]) for t, p in keys[:grouped]])
            if committed.error_code != 0:
                raise CliError(f"commit for {GROUP}: error {committed.error_code}")
    finally:
        admin.close()
    return {"topics": len(topics), "group_partitions": grouped, "create_s": round(created - started, 2),
            "fill_s": round(filled - created, 2)}


def _scrapes(broker: SpawnedBroker, count: int) -> dict[str, Any]:
    """``count`` scrapes one after the other, then one gzipped; the text parsed once."""
    from prometheus_client.parser import text_string_to_metric_families

    cpu = broker_cpu_seconds(broker.pid)
    done = [scrape(broker.metrics_port) for _ in range(count)]
    cpu = broker_cpu_seconds(broker.pid) - cpu
    zipped = scrape(broker.metrics_port, gzipped=True)
    text = done[-1].text
    started = time.perf_counter()
    families = list(text_string_to_metric_families(text.decode()))
    parse_s = time.perf_counter() - started
    samples = sum(len(family.samples) for family in families)
    lag = sum(len(f.samples) for f in families if f.name == "rill_group_lag_bytes")
    return {**_times("scrape", done), "first_scrape_ms": round(done[0].seconds * 1000, 1),
            "broker_cpu_ms_per_scrape": round(cpu * 1000 / count, 1), "series": samples,
            "series_counted": series_count(text), "families": len(families), "group_lag_series": lag,
            "text_bytes": len(text), "gzip_bytes": zipped.wire_bytes, "gzip_scrape_ms": round(zipped.seconds * 1000, 1),
            "parse_ms": round(parse_s * 1000, 1)}


def _times(name: str, scrapes: list[Scrape]) -> dict[str, float]:
    ms = sorted(s.seconds * 1000 for s in scrapes)
    return {f"{name}_ms_p50": round(percentile(ms, 0.5), 1), f"{name}_ms_max": round(ms[-1], 1)}


def _stall(broker: SpawnedBroker, count: int, idle_seconds: float) -> dict[str, Any]:
    """The probe's round trips without scrapes and during them (see the module docstring)."""
    probe = subprocess.Popen([sys.executable, "-m", "rill.client.cli.perf.loop_probe", str(broker.port),
                              PROBE_TOPIC], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert probe.stderr is not None
        if probe.stderr.readline().strip() != b"ready":
            raise CliError(f"the probe did not start: {probe.stderr.read().decode(errors='replace')[-2000:]}")
        quiet_from = time.monotonic()
        time.sleep(idle_seconds)
        quiet_to = time.monotonic()
        done = [scrape(broker.metrics_port) for _ in range(count)]
        out, err = probe.communicate(timeout=120)  # closes its stdin: the probe stops
        if probe.returncode != 0:
            raise CliError(f"the probe failed ({probe.returncode}): {err.decode(errors='replace')[-2000:]}")
    finally:
        if probe.poll() is None:
            probe.kill()
            probe.wait(30)
    samples: list[list[float]] = json.loads(out)["samples"]
    windows = [(s.started, s.started + s.seconds) for s in done]
    quiet = sorted(s * 1000 for t, s in samples if quiet_from <= t and t + s <= quiet_to)
    during = sorted(s * 1000 for t, s in samples if any(t < end and t + s > begin for begin, end in windows))
    return {**_times("stalled_scrape", done), "probe_requests": len(samples),
            **_probe("probe_idle", quiet, quiet_to - quiet_from),
            **_probe("probe_scraping", during, sum(s.seconds for s in done))}


def _probe(name: str, ms: list[float], seconds: float) -> dict[str, Any]:
    """The round trips (ms, ascending) of one phase that lasted ``seconds``: how many, per second, p50/p99/max."""
    if not ms:
        return {f"{name}_requests": 0}
    return {f"{name}_requests": len(ms), f"{name}_per_s": round(len(ms) / seconds), f"{name}_ms_p50":
            round(percentile(ms, 0.5), 3), f"{name}_ms_p99": round(percentile(ms, 0.99), 3),
            f"{name}_ms_max": round(ms[-1], 3)}


def _lines(row: dict[str, Any]) -> list[str]:
    verdict = "holds" if row["goal_holds"] else "DOES NOT hold"
    return [
        f"  {row['partitions']:,} partitions ({row['topics']} topics; group {GROUP} committed on "
        f"{row['group_partitions']:,}): {row['series']:,} series in {row['families']} families, "
        f"{row['text_bytes']:,} B of text, {row['gzip_bytes']:,} B gzipped",
        f"    scrape: p50 {row['scrape_ms_p50']} ms, max {row['scrape_ms_max']} ms (first {row['first_scrape_ms']} ms; "
        f"gzipped {row['gzip_scrape_ms']} ms); broker CPU {row['broker_cpu_ms_per_scrape']} ms per scrape; "
        f"parse (prometheus_client) {row['parse_ms']} ms; broker RSS {row['broker_rss_mb']} MB",
        f"    another process's OFFSETS round trips, without a scrape: {_probe_text(row, 'probe_idle')}; "
        f"during scrapes: {_probe_text(row, 'probe_scraping')} (scrapes meanwhile: p50 "
        f"{row['stalled_scrape_ms_p50']} ms, max {row['stalled_scrape_ms_max']} ms)",
        f"    goal (a scrape under {GOAL_S:g} s): {verdict} at {row['partitions']:,} partitions",
    ]


def _probe_text(row: dict[str, Any], name: str) -> str:
    if not row[f"{name}_requests"]:
        return "no requests"
    return (f"{row[f'{name}_requests']:,} requests ({row[f'{name}_per_s']:,}/s), p50 {row[f'{name}_ms_p50']} ms, "
            f"p99 {row[f'{name}_ms_p99']} ms, max {row[f'{name}_ms_max']} ms")

