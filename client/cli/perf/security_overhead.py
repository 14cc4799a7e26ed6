"""``rill perf security``: what TLS and ACLs cost the data plane, as ratios taken in one run.

It starts brokers of its own (rill.client.cli.spawned_broker) in a work directory under
``--dir``, and compares two sides at a time:

- **TLS**: one broker with two listeners, ``PLAINTEXT://127.0.0.1:0`` and
  ``SSL://127.0.0.1:0`` (and gRPC over TLS, for the consumer's group calls), with
  throwaway certificates (rill.client.security.throwaway_certs). The same benchmarks
  run against each listener; the TLS side passes ``--command-config`` with
  ``security.protocol=SSL`` and the CA.
- **ACLs**: two plaintext brokers, one with ``authorizer.enable = true`` (``super.users``
  unset) and ``--acls`` ACLs granted with ``rill acls add --data-dir`` before it starts,
  the other without the authorizer. The ACLs are what the benchmarks need
  (``User:ANONYMOUS`` may Read, Write and Create the topics, Read and Create the
  ``perf-`` groups) and, to make up the number, others: other users on the same topics,
  ANONYMOUS on other topics, and prefixes that match nothing here.

The benchmarks are ``rill perf produce`` (ingest), ``rill perf consume`` (read and
CRC-check a topic produced before the rounds), ``rill perf e2e`` (produce-to-poll
latency, p50 and p99) and, for TLS with ``--large-mb``, ``rill perf consume`` of 10 KB
messages with 4 MiB fetches (where plaintext uses sendfile and TLS cannot). Each run is
a child process whose command is reported; the broker's CPU time during the run is read
from ``/proc/<pid>/stat``. Every round runs each benchmark on both sides, the order of
the sides swapped from one round to the next (A B, B A, ...) as in .ci/perf-compare, so
drift of a shared machine hits both alike; the ratio is taken per round, and the median
and the range of the rounds' ratios are reported. Before each pair of runs it waits (at
most ``--idle-wait`` seconds) for the machine to be quiet, and it reports how many cores
other work kept busy during the runs (the machine's busy time from ``/proc/stat`` less the
broker's and the client's).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from rill.client.cli.common import CliError, info, positive_int
from rill.client.cli.perf.report import MB, report
from rill.client.cli.spawned_broker import SpawnedBroker

__all__ = ["add_parsers"]

PRODUCE_TOPIC, CONSUME_TOPIC, E2E_TOPIC, LARGE_TOPIC = "sec-produce", "sec-consume", "sec-e2e", "sec-large"
GROUP_PREFIX = "perf-"  # rill perf consumer-api and e2e name their groups perf-consumer-<id>, perf-e2e-<id>
LARGE_MESSAGE, LARGE_FETCH = 10_000, 4 * 1_048_576


@dataclass(frozen=True)
class Bench:
    """One benchmark: its ``rill perf`` arguments, the figures compared, and how to count its bytes."""

    name: str
    argv: tuple[str, ...]
    metrics: tuple[str, ...]  # keys of the JSON result; higher is better unless they end in _ms
    volume: str = ""  # "produce" or "consume": the payload counted for broker CPU per MB; "": none


@dataclass(frozen=True)
class Side:
    """Where one side of a comparison sends its benchmarks: a broker, a port, a --command-config."""

    label: str
    broker: SpawnedBroker
    port: int
    command_config: str | None = None


@dataclass
class Comparison:
    """Every run of both sides of one comparison, by benchmark."""

    title: str
    a: Side
    b: Side
    runs: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)  # bench -> side label -> runs


def add_parsers(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``security`` to ``rill perf``'s subcommands."""
    p = kinds.add_parser("security", help="TLS vs plaintext and ACLs on vs off: produce, consume, e2e as ratios")
    p.add_argument("--dir", help="where the brokers keep their data (default: a temporary directory; "
                                 "/dev/shm takes the disk out)")
    p.add_argument("--rounds", type=positive_int, default=3, help="runs per side and benchmark (default: 3)")
    p.add_argument("--acls", type=positive_int, default=100, help="ACLs on the authorizer's broker (default: 100)")
    p.add_argument("--parts", default="tls,acls", help="comparisons to run: tls, acls (default: both)")
    p.add_argument("--messages", type=positive_int, default=1_000_000, metavar="N",
                   help="messages of 200 B per produce run, and in the consumed topic (default: 1000000)")
    p.add_argument("--rate", type=positive_int, default=10_000, help="e2e messages/s (default: 10000)")
    p.add_argument("--seconds", type=float, default=5.0, help="e2e seconds per run (default: 5)")
    p.add_argument("--large-mb", type=int, default=500, metavar="MB",
                   help="MB of 10 KB messages read with 4 MiB fetches in the TLS comparison (default: 500; 0: none)")
    p.add_argument("--idle-wait", type=float, default=60.0, metavar="SECONDS",
                   help="before each pair of runs, wait up to this long for the machine to be quiet (default: 60)")
    p.add_argument("--idle-below", type=float, default=20.0, metavar="PERCENT",
                   help="quiet: all cores together less busy than this for 3 s in a row (default: 20)")
    p.add_argument("--keep", action="store_true", help="keep the data, certificates and brokers' logs")
    p.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(run=run_security)


def run_security(args: argparse.Namespace) -> int:
    parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    if not parts or set(parts) - {"tls", "acls"}:
        raise CliError(f"--parts: tls and/or acls, not {args.parts!r}")
    work = tempfile.mkdtemp(prefix="rill-perf-security-", dir=args.dir)
    comparisons: list[Comparison] = []
    extra: dict[str, Any] = {"load_before": _loadavg()}
    brokers: list[SpawnedBroker] = []
    try:
        if "tls" in parts:
            comparisons.append(_tls_comparison(args, work, brokers, extra))
        if "acls" in parts:
            comparisons.append(_acl_comparison(args, work, brokers))
        for comparison in comparisons:
            _run_rounds(args, comparison, _benches(args, large=comparison.title.startswith("TLS")))
        for broker in brokers:
            broker.stop()
    finally:
        for broker in brokers:
            if broker.proc is not None and broker.proc.poll() is None:
                broker.kill9()
        if args.keep:
            _say(args, f"  data, certificates and logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    extra["load_after"] = _loadavg()
    _report(args, comparisons, extra)
    return 0


def _benches(args: argparse.Namespace, *, large: bool) -> list[Bench]:
    benches = [
        Bench("produce", ("produce", "-t", PRODUCE_TOPIC, "--partitions", "4", "--message-size", "200", "--batch", "50",
                          "--messages", str(args.messages)), ("messages_per_s",), "produce"),
        Bench("consume", ("consume", "-t", CONSUME_TOPIC), ("messages_per_s",), "consume"),
        Bench("e2e", ("e2e", "-t", E2E_TOPIC, "--runs", "1", "--seconds", f"{args.seconds:g}", "--rate",
                      str(args.rate), "--warmup", str(min(1000, int(args.rate * args.seconds) // 5))),
              ("p50_ms", "p99_ms")),
    ]
    if large and args.large_mb > 0:
        benches.append(Bench("consume-10KB-4MiB", ("consume", "-t", LARGE_TOPIC, "--fetch-size", str(LARGE_FETCH)),
                             ("mb_per_s",), "consume"))
    return benches


# ---------------------------------------------------------------- the brokers


def _listener_port(broker: SpawnedBroker, protocol: str) -> int:
    """The port the broker bound for its ``protocol`` listener (its ``broker.ready`` line lists them)."""
    ready = broker.event("broker.ready") or {}
    for listener in ready.get("listeners") or ():
        if str(listener).startswith(f"{protocol}://"):
            return int(str(listener).rsplit(":", 1)[1])
    raise CliError(f"the broker names no {protocol} listener; see {broker.log_path}")


def _tls_comparison(args: argparse.Namespace, work: str, brokers: list[SpawnedBroker],
                    extra: dict[str, Any]) -> Comparison:
    from rill.client.security.throwaway_certs import issue, make_ca, write_pair

    certs = os.path.join(work, "certs")
    ca = make_ca()
    write_pair(ca, certs, "ca")
    write_pair(issue(ca, "broker"), certs, "broker")
    properties = os.path.join(work, "tls.properties")
    with open(properties, "w", encoding="utf-8") as f:
        f.write(f"security.protocol=SSL\nssl.cafile={certs}/ca.pem\n")
    broker = SpawnedBroker(os.path.join(work, "tls-data"), {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", "grpc.ssl.port": 0,
        "ssl.certfile": f"{certs}/broker.pem", "ssl.keyfile": f"{certs}/broker.key"})
    brokers.append(broker)
    broker.start(120)
    plain_port, ssl_port = _listener_port(broker, "PLAINTEXT"), _listener_port(broker, "SSL")
    extra["tls"] = _tls_session(ssl_port, f"{certs}/ca.pem")
    _say(args, f"  TLS broker (pid {broker.pid}): PLAINTEXT 127.0.0.1:{plain_port}, SSL 127.0.0.1:{ssl_port} "
               f"({extra['tls']})")
    _setup_topics(args, broker, plain_port, large=args.large_mb > 0)
    return Comparison("TLS vs PLAINTEXT (one broker, two listeners)", Side("PLAINTEXT", broker, plain_port),
                      Side("SSL", broker, ssl_port, properties))


def _tls_session(port: int, cafile: str) -> str:
    """The protocol version and cipher a client negotiates with the SSL listener."""
    from rill.client.security.client_security import client_context

    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with client_context(cafile).wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            cipher = tls.cipher()
            return f"{tls.version()} {cipher[0] if cipher else '?'}"


def _acl_comparison(args: argparse.Namespace, work: str, brokers: list[SpawnedBroker]) -> Comparison:
    on_dir = os.path.join(work, "acl-data")
    granted = _grant_acls(on_dir, args.acls)
    off = SpawnedBroker(os.path.join(work, "noacl-data"))
    on = SpawnedBroker(on_dir, {"authorizer.enable": "true"})
    for broker in (off, on):
        brokers.append(broker)
        broker.start(120)
        _setup_topics(args, broker, broker.port, large=False)
    _say(args, f"  authorizer off: pid {off.pid}, port {off.port}; on with {granted} ACLs: pid {on.pid}, "
               f"port {on.port}")
    return Comparison(f"ACLs on ({granted} ACLs) vs authorizer off (two brokers)",
                      Side("authorizer off", off, off.port), Side(f"{granted} ACLs", on, on.port))


def acl_commands(data_dir: str, count: int) -> list[list[str]]:
    """``rill acls add`` argument lists granting exactly ``count`` ACLs: the benchmarks' own first
    (ANONYMOUS Read, Write, Create on their 4 topics; Read, Create on the ``perf-`` groups), then others.

    Raises:
        CliError: ``count`` is below the benchmarks' own 14.
    """
    store = ["--data-dir", data_dir]
    anonymous = ["--allow-principal", "User:ANONYMOUS"]
    topics = [PRODUCE_TOPIC, CONSUME_TOPIC, E2E_TOPIC, LARGE_TOPIC]
    commands = [[*store, *anonymous, *_each("--operation", ["Read", "Write", "Create"]), *_each("--topic", topics)],
                [*store, *anonymous, "--operation", "Read", "--operation", "Create", "--group", GROUP_PREFIX,
                 "--resource-pattern-type", "prefixed"]]
    needed = 3 * len(topics) + 2
    if count < needed:
        raise CliError(f"--acls must be at least {needed} (what the benchmarks need)")
    others = count - needed
    users, literal, prefixed = others - 2 * (others // 3), others // 3, others // 3
    for i, topic in enumerate(topics[:3]):  # other users' Reads of the same topics
        principals = [f"User:user-{n}" for n in range(users) if n % 3 == i]
        if principals:
            commands.append([*store, *_each("--allow-principal", principals), "--operation", "Read", "--topic", topic])
    if literal:
        commands.append([*store, *anonymous, "--operation", "Write", *_each("--topic", [f"other-{n}" for n in
                                                                                         range(literal)])])
    if prefixed:
        commands.append([*store, *anonymous, "--operation", "Read", "--resource-pattern-type", "prefixed",
                         *_each("--topic", [f"logs-{n}." for n in range(prefixed)])])
    return [["acls", "add", *command] for command in commands]


def _each(flag: str, values: list[str]) -> list[str]:
    return [item for value in values for item in (flag, value)]


def _grant_acls(data_dir: str, count: int) -> int:
    """Grant ``count`` ACLs in ``data_dir`` with ``rill acls add``; return how many ``rill acls list`` shows."""
    os.makedirs(data_dir, exist_ok=True)
    for command in acl_commands(data_dir, count):
        _rill(command)
    listing = _rill(["acls", "list", "--data-dir", data_dir])
    granted = sum(1 for line in listing.splitlines() if line.strip().startswith("(principal="))
    if granted != count:
        raise CliError(f"granted {granted} ACLs, not {count}:\n{listing}")
    return granted


def _setup_topics(args: argparse.Namespace, broker: SpawnedBroker, port: int, *, large: bool) -> None:
    """Fill the consumed topics (not measured): ``--messages`` of 200 B, and ``--large-mb`` of 10 KB."""
    address = ["-b", f"127.0.0.1:{port}", "--json", "-q"]
    _rill(["perf", "produce", "-t", CONSUME_TOPIC, "--partitions", "4", "--messages", str(args.messages), *address])
    if large:
        _rill(["perf", "produce", "-t", LARGE_TOPIC, "--partitions", "1", "--message-size", str(LARGE_MESSAGE),
               "--batch", "50", "--messages", str(args.large_mb * MB // LARGE_MESSAGE), *address])


# ---------------------------------------------------------------- the rounds


def _rill(argv: list[str], timeout: float = 900) -> str:
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


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # every descendant waited for, e2e's producer too
    return usage.ru_utime + usage.ru_stime


def _run_once(side: Side, bench: Bench) -> dict[str, Any]:
    """One benchmark run: its JSON result, with the broker's CPU time, the client's and everything else's."""
    argv = ["perf", *bench.argv, "-b", f"127.0.0.1:{side.port}", "--json", "-q"]
    if side.command_config:
        argv += ["--command-config", side.command_config]
    load = _loadavg()
    cpu, client, machine, started = (broker_cpu_seconds(side.broker.pid), _children_cpu_seconds(),
                                     machine_cpu_seconds(), time.monotonic())
    result: dict[str, Any] = json.loads(_rill(argv).strip().splitlines()[-1])
    wall = time.monotonic() - started
    result["broker_cpu_s"] = broker_cpu_seconds(side.broker.pid) - cpu
    result["client_cpu_s"] = _children_cpu_seconds() - client
    others = machine_cpu_seconds() - machine - result["broker_cpu_s"] - result["client_cpu_s"]
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


def _run_rounds(args: argparse.Namespace, comparison: Comparison, benches: list[Bench]) -> None:
    for k in range(args.rounds):
        order = (comparison.a, comparison.b) if k % 2 == 0 else (comparison.b, comparison.a)
        for bench in benches:
            by_side = comparison.runs.setdefault(bench.name, {comparison.a.label: [], comparison.b.label: []})
            quiet = wait_until_quiet(args.idle_wait, args.idle_below / 100)
            for side in order:
                by_side[side.label].append({**_run_once(side, bench), "waited_for_quiet": quiet})
            _say(args, f"  {comparison.title.split(' (')[0]}, round {k + 1}, {bench.name}: "
                 + ", ".join(f"{label} {_figure(runs[-1][bench.metrics[0]], bench.metrics[0])}"
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


def _figure(value: float, metric: str) -> str:
    return f"{value:.3f} ms" if metric.endswith("_ms") else f"{value:,.1f}" if value < 10_000 else f"{value:,.0f}"


def _loadavg() -> str:
    with open("/proc/loadavg", encoding="ascii") as f:
        return " ".join(f.read().split()[:3])


# ---------------------------------------------------------------- the report


def _rows(comparison: Comparison, benches: dict[str, Bench]) -> list[dict[str, Any]]:
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
                                   f"{b}_runs": bv, "command": by_side[b][0]["command"]}
            cpu = {label: [float(r["broker_cpu_us_per_mb"]) for r in by_side[label] if "broker_cpu_us_per_mb" in r]
                   for label in (a, b)}
            if all(cpu.values()):
                row["broker_cpu_us_per_mb"] = {label: statistics.median(v) for label, v in cpu.items()}
                row["broker_cpu_us_per_mb_runs"] = cpu
            runs = by_side[a] + by_side[b]
            row["other_cores"] = statistics.median(float(r["other_cores"]) for r in runs)
            row["other_cores_runs"] = {label: [round(float(r["other_cores"]), 3) for r in by_side[label]]
                                       for label in (a, b)}
            row["quiet_pairs"] = sum(bool(r["waited_for_quiet"]) for r in runs) // 2
            rows.append(row)
    return rows


def _report(args: argparse.Namespace, comparisons: list[Comparison], extra: dict[str, Any]) -> None:
    benches = {bench.name: bench for bench in _benches(args, large=True)}
    result: dict[str, Any] = {"benchmark": "security", "rounds": args.rounds, **extra, "comparisons": []}
    lines = [f"rill perf security: {args.rounds} round(s) per side, sides alternating (A B, B A, ...); "
             f"load average {extra['load_before']} before, {extra['load_after']} after"]
    for comparison in comparisons:
        a, b = comparison.a.label, comparison.b.label
        rows = _rows(comparison, benches)
        result["comparisons"].append({"title": comparison.title, "a": a, "b": b, "rows": rows})
        lines.append(f"  {comparison.title}: ratios {b} / {a}, median of rounds [range]")
        for row in rows:
            cpu = row.get("broker_cpu_us_per_mb")
            metric = row["metric"]
            lines.append(f"    {row['benchmark']:18} {metric:14} {a} {_figure(row[a], metric):>12}  {b} "
                         f"{_figure(row[b], metric):>12}  ratio {row['ratio']:.3f} [{row['ratio_min']:.3f}-"
                         f"{row['ratio_max']:.3f}]" + (f"  broker CPU/MB {cpu[a]:,.0f} -> {cpu[b]:,.0f} us"
                                                       if cpu else "")
                         + f"  other work {row['other_cores']:.2f} cores, {row['quiet_pairs']} quiet start(s)")
    if "tls" in extra:
        lines.append(f"  TLS session: {extra['tls']}")
    report(args, result, lines)


def _say(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        info(text)
