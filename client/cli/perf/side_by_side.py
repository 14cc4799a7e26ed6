"""Two brokers (or two listeners) compared in one run, benchmark by benchmark, as per-round ratios.

Shared by ``rill perf security`` (TLS against plaintext, ACLs against none) and ``rill perf
metrics`` (metrics on against off). A :class:`Comparison` has two :class:`Side` s; each
round runs every :class:`Bench` on both, the order of the sides swapped from one round to
the next (A B, B A, ...) as in .ci/perf-compare, so drift of a shared machine hits both
alike; the ratio B / A is taken per round and its median and range are reported.

Each run is a child process (``rill perf ... --json -q``, this interpreter) whose JSON
result is kept with the broker's CPU time during it (``/proc/<pid>/stat``), the client's
(every child waited for) and how many cores other work kept busy meanwhile (the machine's
busy time from ``/proc/stat`` less the broker's, the client's and this process's). Before
each pair of runs it waits (at most ``--idle-wait`` seconds) for the machine to be quiet.

Not thread-safe: one comparison runs at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from rill.client.cli.common import CliError, info, positive_int
from rill.client.cli.perf.report import MB
from rill.client.cli.spawned_broker import SpawnedBroker

__all__ = ["Bench", "Comparison", "Side", "add_round_options", "broker_cpu_seconds", "comparison_lines",
           "comparison_rows", "data_plane_benches", "fill_topic", "figure", "loadavg", "machine_cpu_seconds",
           "rill", "run_rounds", "say", "wait_until_quiet"]


@dataclass(frozen=True)
class Bench:
    """One benchmark: its ``rill perf`` arguments, the figures compared, and how to count its bytes."""

    name: str
    argv: tuple[str, ...]
    metrics: tuple[str, ...]  # keys of the JSON result; higher is better unless they end in _ms
    volume: str = ""  # "produce" or "consume": the payload counted for broker CPU per MB; "": none


@dataclass(frozen=True)
class Side:
    """Where one side of a comparison sends its benchmarks: a broker, a port, a --command-config.

    ``during``, when given, makes a context manager entered around each of this side's runs
    (e.g. a scraper); the dict it yields is merged into the run's result once it exits.
    """

    label: str
    broker: SpawnedBroker
    port: int
    command_config: str | None = None
    during: Callable[[], AbstractContextManager[dict[str, Any]]] | None = None


@dataclass
class Comparison:
    """Every run of both sides of one comparison, by benchmark."""

    title: str
    a: Side
    b: Side
    runs: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)  # bench -> side label -> runs


def add_round_options(p: argparse.ArgumentParser, rounds: int, kept: str = "the data and the brokers' logs") -> None:
    """The options every side-by-side harness takes: --dir, --rounds, the idle wait, --keep, --json, -q."""
    p.add_argument("--dir", help="where the brokers keep their data (default: a temporary directory; "
                                 "/dev/shm takes the disk out)")
    p.add_argument("--rounds", type=positive_int, default=rounds, help=f"runs per side and benchmark (default: {rounds})")
    p.add_argument("--idle-wait", type=float, default=60.0, metavar="SECONDS",
                   help="before each pair of runs, wait up to this long for the machine to be quiet (default: 60)")
    p.add_argument("--idle-below", type=float, default=20.0, metavar="PERCENT",
                   help="quiet: all cores together less busy than this for 3 s in a row (default: 20)")
    p.add_argument("--keep", action="store_true", help=f"keep {kept}")
    p.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def data_plane_benches(produce_topic: str, consume_topic: str, e2e_topic: str, *, messages: int, rate: int,
                       seconds: float) -> list[Bench]:
    """``rill perf produce`` (``messages`` x 200 B into 4 partitions), ``consume`` (``consume_topic``, filled
    beforehand with :func:`fill_topic`) and ``e2e`` (p50 and p99 at ``rate`` msg/s for ``seconds``)."""
    return [
        Bench("produce", ("produce", "-t", produce_topic, "--partitions", "4", "--message-size", "200", "--batch",
                          "50", "--messages", str(messages)), ("messages_per_s",), "produce"),
        Bench("consume", ("consume", "-t", consume_topic), ("messages_per_s",), "consume"),
        Bench("e2e", ("e2e", "-t", e2e_topic, "--runs", "1", "--seconds", f"{seconds:g}", "--rate", str(rate),
                      "--warmup", str(min(1000, int(rate * seconds) // 5))), ("p50_ms", "p99_ms")),
    ]


def fill_topic(port: int, topic: str, messages: int) -> None:
    """Produce ``messages`` of 200 B into ``topic`` (4 partitions) for the consume benchmark (not measured)."""
    rill(["perf", "produce", "-t", topic, "--partitions", "4", "--messages", str(messages),
          "-b", f"127.0.0.1:{port}", "--json", "-q"])


# ---------------------------------------------------------------- one run


def rill(argv: list[str], timeout: float = 900) -> str:
    """Run ``rill ARGV`` in a child process (this interpreter); its stdout. Raises CliError if it fails."""
    done = subprocess.run([sys.executable, "-m", "rill.client.cli.main", *argv], capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        raise CliError(f"rill {' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout


def broker_cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` so far (``/proc/<pid>/stat`` fields 14 and 15)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu_seconds() -> float:
    """CPU time the whole machine has been busy, over all cores (``/proc/stat``: all but idle and iowait)."""
    with open("/proc/stat", encoding="ascii") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def _cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _run_once(side: Side, bench: Bench) -> dict[str, Any]:
    """One benchmark run: its JSON result, with the broker's CPU time, the client's and everything else's."""
    argv = ["perf", *bench.argv, "-b", f"127.0.0.1:{side.port}", "--json", "-q"]
    if side.command_config:
        argv += ["--command-config", side.command_config]
    load = loadavg()
    extra: dict[str, Any] = {}
    cpu, client, own, machine = (broker_cpu_seconds(side.broker.pid), _cpu_seconds(resource.RUSAGE_CHILDREN),
                                 _cpu_seconds(resource.RUSAGE_SELF), machine_cpu_seconds())
    started = time.monotonic()
    if side.during is None:
        out = rill(argv)
    else:
        with side.during() as extra:
            out = rill(argv)
    wall = time.monotonic() - started
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    result.update(extra)
    result["broker_cpu_s"] = broker_cpu_seconds(side.broker.pid) - cpu
    result["client_cpu_s"] = _cpu_seconds(resource.RUSAGE_CHILDREN) - client  # e2e's producer process too
    own = _cpu_seconds(resource.RUSAGE_SELF) - own  # this process: a scraper thread, if any
    others = machine_cpu_seconds() - machine - result["broker_cpu_s"] - result["client_cpu_s"] - own
    result["other_cores"] = max(0.0, others) / wall  # cores kept busy by other work during the run
    result["load_before"] = load
    payload = _payload(result, bench.volume)
    if payload:
        result["broker_cpu_us_per_mb"] = result["broker_cpu_s"] * 1e6 / (payload / MB)
    return result


def _payload(result: dict[str, Any], volume: str) -> int:
    if volume == "produce":
        return int(result["messages"]) * int(result["message_size"])
    if volume == "consume":
        return int(result["payload_bytes"])
    return 0


def run_rounds(args: argparse.Namespace, comparison: Comparison, benches: list[Bench]) -> None:
    """``args.rounds`` rounds of every benchmark on both sides, alternating their order; progress lines unless
    ``args.quiet``; waits for a quiet machine (``args.idle_wait``, ``args.idle_below``) before each pair."""
    for k in range(args.rounds):
        order = (comparison.a, comparison.b) if k % 2 == 0 else (comparison.b, comparison.a)
        for bench in benches:
            by_side = comparison.runs.setdefault(bench.name, {comparison.a.label: [], comparison.b.label: []})
            quiet = wait_until_quiet(args.idle_wait, args.idle_below / 100)
            for side in order:
                by_side[side.label].append({**_run_once(side, bench), "waited_for_quiet": quiet})
            say(args, f"  {comparison.title.split(' (')[0]}, round {k + 1}, {bench.name}: "
                + ", ".join(f"{label} {figure(runs[-1][bench.metrics[0]], bench.metrics[0])}"
                            for label, runs in by_side.items()))


def wait_until_quiet(limit: float, below: float, window: float = 1.0, windows: int = 3) -> bool:
    """Wait until the machine was busy less than ``below`` (a share of all cores) for ``windows``
    windows in a row, at most ``limit`` seconds: True if it was, False if the time ran out."""
    deadline, quiet = time.monotonic() + limit, 0
    cores = os.cpu_count() or 1
    while quiet < windows and time.monotonic() < deadline:
        busy = machine_cpu_seconds()
        time.sleep(window)
        quiet = quiet + 1 if (machine_cpu_seconds() - busy) / (window * cores) < below else 0
    return quiet >= windows


def figure(value: float, metric: str) -> str:
    return f"{value:.3f} ms" if metric.endswith("_ms") else f"{value:,.1f}" if value < 10_000 else f"{value:,.0f}"


def loadavg() -> str:
    with open("/proc/loadavg", encoding="ascii") as f:
        return " ".join(f.read().split()[:3])


def release(args: argparse.Namespace, brokers: Iterable[SpawnedBroker], work: str, kept: str) -> None:
    """After the rounds (or a failure): kill -9 a broker still running, then keep ``work`` (``--keep``, saying
    it keeps ``kept``) or remove it."""
    for broker in brokers:
        if broker.proc is not None and broker.proc.poll() is None:
            broker.kill9()
    if args.keep:
        say(args, f"  {kept} kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


def say(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        info(text)


# ---------------------------------------------------------------- the report


def comparison_rows(comparison: Comparison, benches: dict[str, Bench]) -> list[dict[str, Any]]:
    """Per benchmark and figure: each side's median, the rounds' ratios b/a, their median and range, the
    broker's CPU per MB, and the cores other work used meanwhile (median) and the pairs that began quiet."""
    rows = []
    a, b = comparison.a.label, comparison.b.label
    for name, by_side in comparison.runs.items():
        for metric in benches[name].metrics:
            av = [float(r[metric]) for r in by_side[a]]
            bv = [float(r[metric]) for r in by_side[b]]
            ratios = [y / x for x, y in zip(av, bv)]
            row: dict[str, Any] = {"benchmark": name, "metric": metric, a: statistics.median(av),
                                   b: statistics.median(bv), "ratio": statistics.median(ratios),
                                   "ratio_min": min(ratios), "ratio_max": max(ratios), f"{a}_runs": av,
                                   f"{b}_runs": bv, "ratio_runs": [round(r, 4) for r in ratios],
                                   "command": by_side[b][0]["command"]}
            cpu = {label: [float(r["broker_cpu_us_per_mb"]) for r in by_side[label] if "broker_cpu_us_per_mb" in r]
                   for label in (a, b)}
            if all(len(v) == len(av) for v in cpu.values()):
                row["broker_cpu_us_per_mb"] = {label: statistics.median(v) for label, v in cpu.items()}
                row["broker_cpu_us_per_mb_runs"] = cpu
                cpu_ratios = [y / x for x, y in zip(cpu[a], cpu[b]) if x > 0]
                if cpu_ratios:  # per round, as the figures' ratios: b's broker CPU per MB over a's
                    row.update(broker_cpu_ratio=statistics.median(cpu_ratios), broker_cpu_ratio_min=min(cpu_ratios),
                               broker_cpu_ratio_max=max(cpu_ratios))
            runs = by_side[a] + by_side[b]
            row["other_cores"] = statistics.median(float(r["other_cores"]) for r in runs)
            row["other_cores_runs"] = {label: [round(float(r["other_cores"]), 3) for r in by_side[label]]
                                       for label in (a, b)}
            row["quiet_pairs"] = sum(bool(r["waited_for_quiet"]) for r in runs) // 2
            rows.append(row)
    return rows


def comparison_lines(comparison: Comparison, rows: list[dict[str, Any]]) -> list[str]:
    """The text report of one comparison: a title line, then one line per row of :func:`comparison_rows`."""
    a, b = comparison.a.label, comparison.b.label
    lines = [f"  {comparison.title}: ratios {b} / {a}, median of rounds [range]"]
    for row in rows:
        cpu = row.get("broker_cpu_us_per_mb")
        metric = row["metric"]
        lines.append(f"    {row['benchmark']:18} {metric:14} {a} {figure(row[a], metric):>12}  {b} "
                     f"{figure(row[b], metric):>12}  ratio {row['ratio']:.3f} [{row['ratio_min']:.3f}-"
                     f"{row['ratio_max']:.3f}]" + (f"  broker CPU/MB {cpu[a]:,.0f} -> {cpu[b]:,.0f} us" if cpu else "")
                     + (f" (x{row['broker_cpu_ratio']:.3f} [{row['broker_cpu_ratio_min']:.3f}-"
                        f"{row['broker_cpu_ratio_max']:.3f}])" if "broker_cpu_ratio" in row else "")
                     + f"  other work {row['other_cores']:.2f} cores, {row['quiet_pairs']} quiet start(s)")
    return lines
