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
messages with 4 MiB fetches (where plaintext uses sendfile and TLS cannot). The rounds,
the broker CPU accounting, the wait for a quiet machine and the ratios are
:mod:`.side_by_side`'s (shared with ``rill perf metrics``): every round runs each
benchmark on both sides, the order of the sides swapped from one round to the next, and
the median and range of the rounds' ratios are reported.
"""

from __future__ import annotations

import argparse
import os
import socket
import tempfile
from typing import Any

from rill.client.cli.common import CliError, positive_int
from rill.client.cli.perf.report import MB, report
from rill.client.cli.perf.side_by_side import (Bench, Comparison, Side, add_round_options, comparison_lines,
                                               comparison_rows, data_plane_benches, fill_topic, loadavg, release,
                                               rill, run_rounds, say)
from rill.client.cli.spawned_broker import SpawnedBroker

__all__ = ["add_parsers"]

PRODUCE_TOPIC, CONSUME_TOPIC, E2E_TOPIC, LARGE_TOPIC = "sec-produce", "sec-consume", "sec-e2e", "sec-large"
GROUP_PREFIX = "perf-"  # rill perf consumer-api and e2e name their groups perf-consumer-<id>, perf-e2e-<id>
LARGE_MESSAGE, LARGE_FETCH = 10_000, 4 * 1_048_576


def add_parsers(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``security`` to ``rill perf``'s subcommands."""
    p = kinds.add_parser("security", help="TLS vs plaintext and ACLs on vs off: produce, consume, e2e as ratios")
    add_round_options(p, 3, "the data, certificates and brokers' logs")
    p.add_argument("--acls", type=positive_int, default=100, help="ACLs on the authorizer's broker (default: 100)")
    p.add_argument("--parts", default="tls,acls", help="comparisons to run: tls, acls (default: both)")
    p.add_argument("--messages", type=positive_int, default=1_000_000, metavar="N",
                   help="messages of 200 B per produce run, and in the consumed topic (default: 1000000)")
    p.add_argument("--rate", type=positive_int, default=10_000, help="e2e messages/s (default: 10000)")
    p.add_argument("--seconds", type=float, default=5.0, help="e2e seconds per run (default: 5)")
    p.add_argument("--large-mb", type=int, default=500, metavar="MB",
                   help="MB of 10 KB messages read with 4 MiB fetches in the TLS comparison (default: 500; 0: none)")
    p.set_defaults(run=run_security)


def run_security(args: argparse.Namespace) -> int:
    parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    if not parts or set(parts) - {"tls", "acls"}:
        raise CliError(f"--parts: tls and/or acls, not {args.parts!r}")
    work = tempfile.mkdtemp(prefix="rill-perf-security-", dir=args.dir)
    comparisons: list[Comparison] = []
    extra: dict[str, Any] = {"load_before": loadavg()}
    brokers: list[SpawnedBroker] = []
    try:
        if "tls" in parts:
            comparisons.append(_tls_comparison(args, work, brokers, extra))
        if "acls" in parts:
            comparisons.append(_acl_comparison(args, work, brokers))
        for comparison in comparisons:
            run_rounds(args, comparison, _benches(args, large=comparison.title.startswith("TLS")))
        for broker in brokers:
            broker.stop()
    finally:
        release(args, brokers, work, "data, certificates and logs")
    extra["load_after"] = loadavg()
    _report(args, comparisons, extra)
    return 0


def _benches(args: argparse.Namespace, *, large: bool) -> list[Bench]:
    benches = data_plane_benches(PRODUCE_TOPIC, CONSUME_TOPIC, E2E_TOPIC, messages=args.messages, rate=args.rate,
                                 seconds=args.seconds)
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
    say(args, f"  TLS broker (pid {broker.pid}): PLAINTEXT 127.0.0.1:{plain_port}, SSL 127.0.0.1:{ssl_port} "
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
    say(args, f"  authorizer off: pid {off.pid}, port {off.port}; on with {granted} ACLs: pid {on.pid}, "
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
        rill(command)
    listing = rill(["acls", "list", "--data-dir", data_dir])
    granted = sum(1 for line in listing.splitlines() if line.strip().startswith("(principal="))
    if granted != count:
        raise CliError(f"granted {granted} ACLs, not {count}:\n{listing}")
    return granted


def _setup_topics(args: argparse.Namespace, broker: SpawnedBroker, port: int, *, large: bool) -> None:
    """Fill the consumed topics (not measured): ``--messages`` of 200 B, and ``--large-mb`` of 10 KB."""
    fill_topic(port, CONSUME_TOPIC, args.messages)
    if large:
        rill(["perf", "produce", "-t", LARGE_TOPIC, "--partitions", "1", "--message-size", str(LARGE_MESSAGE),
               "--batch", "50", "--messages", str(args.large_mb * MB // LARGE_MESSAGE), "-b", f"127.0.0.1:{port}", "--json", "-q"])


# ---------------------------------------------------------------- the report


def _report(args: argparse.Namespace, comparisons: list[Comparison], extra: dict[str, Any]) -> None:
    benches = {bench.name: bench for bench in _benches(args, large=True)}
    result: dict[str, Any] = {"benchmark": "security", "rounds": args.rounds, **extra, "comparisons": []}
    lines = [f"rill perf security: {args.rounds} round(s) per side, sides alternating (A B, B A, ...); "
             f"load average {extra['load_before']} before, {extra['load_after']} after"]
    for comparison in comparisons:
        rows = comparison_rows(comparison, benches)
        result["comparisons"].append({"title": comparison.title, "a": comparison.a.label, "b": comparison.b.label,
                                      "rows": rows})
        lines += comparison_lines(comparison, rows)
    if "tls" in extra:
        lines.append(f"  TLS session: {extra['tls']}")
    report(args, result, lines)
