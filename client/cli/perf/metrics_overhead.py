"""``rill perf metrics``: what Prometheus metrics cost the data plane, as ratios taken in one run.

It starts two brokers of its own (rill.client.cli.spawned_broker) in a work directory
under ``--dir``: one with ``metrics.port = -1`` (metrics on, on a free port: the request
path counts every request in its histograms and per-topic counters) and one with
``metrics.port = 0`` (off: nothing is counted and nothing serves). The benchmarks are
those of ``rill perf security`` (:func:`.side_by_side.data_plane_benches`): ``rill perf
produce`` (ingest), ``rill perf consume`` (read and CRC-check a topic produced before the
rounds) and ``rill perf e2e`` (produce-to-poll latency, p50 and p99), alternating the
sides from one round to the next, as per-round ratios on / off (:mod:`.side_by_side`).

While a benchmark runs against the "on" broker, a thread of this process scrapes its
``/metrics`` every ``--scrape-interval`` seconds of benchmark time (15 by default, as
Prometheus; 0: never), so the cost includes real scrapes at that rate; the report says
how many scrapes fell in the runs and how long they took.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from typing import Any

from rill.client.cli.common import CliError, positive_float, positive_int
from rill.client.cli.perf.metrics_scrape import IntervalScraper
from rill.client.cli.perf.report import report
from rill.client.cli.perf.side_by_side import (Comparison, Side, add_round_options, comparison_lines,
                                               comparison_rows, data_plane_benches, fill_topic, loadavg, release,
                                               run_rounds, say)
from rill.client.cli.spawned_broker import SpawnedBroker

__all__ = ["add_parsers"]

PRODUCE_TOPIC, CONSUME_TOPIC, E2E_TOPIC = "met-produce", "met-consume", "met-e2e"
OFF, ON = "metrics off", "metrics on"


def add_parsers(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``metrics`` to ``rill perf``'s subcommands."""
    p = kinds.add_parser("metrics", help="metrics on vs off (two brokers): produce, consume, e2e as ratios")
    add_round_options(p, 5)
    p.add_argument("--messages", type=positive_int, default=1_000_000, metavar="N",
                   help="messages of 200 B per produce run, and in the consumed topic (default: 1000000)")
    p.add_argument("--rate", type=positive_int, default=10_000, help="e2e messages/s (default: 10000)")
    p.add_argument("--seconds", type=positive_float, default=5.0, help="e2e seconds per run (default: 5)")
    p.add_argument("--scrape-interval", type=float, default=15.0, metavar="SECONDS",
                   help="scrape the metrics broker's /metrics every SECONDS of benchmark time (default: 15, "
                        "Prometheus's default; 0: never)")
    p.set_defaults(run=run_metrics)


def run_metrics(args: argparse.Namespace) -> int:
    if args.scrape_interval < 0:
        raise CliError(f"--scrape-interval: seconds, 0 for never, not {args.scrape_interval:g}", 2)
    work = tempfile.mkdtemp(prefix="rill-perf-metrics-", dir=args.dir)
    extra: dict[str, Any] = {"load_before": loadavg(), "scrape_interval_s": args.scrape_interval}
    off = SpawnedBroker(os.path.join(work, "off-data"), metrics=0)
    on = SpawnedBroker(os.path.join(work, "on-data"), metrics=-1)
    scraper: IntervalScraper | None = None
    benches = data_plane_benches(PRODUCE_TOPIC, CONSUME_TOPIC, E2E_TOPIC, messages=args.messages, rate=args.rate,
                                 seconds=args.seconds)
    try:
        for broker in (off, on):
            broker.start(120)
            fill_topic(broker.port, CONSUME_TOPIC, args.messages)
        if on.metrics_port == 0 or off.metrics_port != 0:
            raise CliError(f"metrics should be on at pid {on.pid} only; see {on.log_path}, {off.log_path}")
        say(args, f"  metrics off: pid {off.pid}, port {off.port}; on: pid {on.pid}, port {on.port}, "
                  f"/metrics on {on.metrics_port}")
        if args.scrape_interval > 0:
            scraper = IntervalScraper(on.metrics_port, args.scrape_interval)
        comparison = Comparison("metrics on vs off (two brokers)", Side(OFF, off, off.port),
                                Side(ON, on, on.port, during=scraper.during if scraper is not None else None))
        run_rounds(args, comparison, benches)
        if scraper is not None:
            scraper.close()
            extra.update(_scrapes(scraper))
        for broker in (off, on):
            broker.stop()
    finally:
        if scraper is not None:
            scraper.close()
        release(args, (off, on), work, "data and logs")
    extra["load_after"] = loadavg()
    rows = comparison_rows(comparison, {bench.name: bench for bench in benches})
    result: dict[str, Any] = {"benchmark": "metrics", "rounds": args.rounds, **extra,
                              "comparisons": [{"title": comparison.title, "a": OFF, "b": ON, "rows": rows}]}
    lines = [f"rill perf metrics: {args.rounds} round(s) per side, sides alternating (A B, B A, ...); "
             f"load average {extra['load_before']} before, {extra['load_after']} after",
             *comparison_lines(comparison, rows)]
    if scraper is None:
        lines.append("  no scrapes (--scrape-interval 0)")
    else:
        lines.append(f"  scrapes of the metrics broker during its runs: {extra['scrapes']} (every "
                     f"{args.scrape_interval:g} s of benchmark time), "
                     + (f"median {extra['scrape_ms_p50']:.1f} ms, max {extra['scrape_ms_max']:.1f} ms, "
                        f"{extra['scrape_series']:,} series" if extra["scrapes"] else "none fell in a run"))
    report(args, result, lines)
    return 0


def _scrapes(scraper: IntervalScraper) -> dict[str, Any]:
    seconds = scraper.seconds
    out: dict[str, Any] = {"scrapes": len(seconds)}
    if seconds:
        out.update(scrape_ms_p50=round(statistics.median(seconds) * 1000, 2),
                   scrape_ms_max=round(max(seconds) * 1000, 2), scrape_series=scraper.series,
                   scrape_text_bytes=scraper.text_bytes)
    return out
