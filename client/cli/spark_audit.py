"""``rill spark audit``: compare the producers' audit events with the messages present (docs/spark.md, "Audit").

Prints one line per topic and window (expected, found, missing) on stdout and exits 3
when any message is missing (2 is bad usage, 1 an error). Spark runs in local mode in this process.
``--command-config FILE`` secures every connection, as for ``rill spark load``.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import datetime, timezone

from rill.client.cli.common import CliError, add_broker_arguments, topic_name

EXIT_MISSING = 3  # not 2: argparse already exits 2 on bad usage
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")


def duration_ms(text: str) -> int:
    """``500ms``, ``30s``, ``1m``, ``2h``, ``1d`` (or a number of ms) -> ms."""
    if text.strip().isdigit():
        value = int(text)
    else:
        match = _DURATION.match(text)
        if match is None:
            raise argparse.ArgumentTypeError(f"expected a duration such as 30s, 1m or 1h, got {text!r}")
        value = int(match.group(1)) * _UNITS_MS[match.group(2)]
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a duration must be > 0, got {text!r}")
    return value


def since_ms(text: str) -> int:
    """A start time: a duration ago (``2h``), ms since the epoch, or an ISO 8601 time (UTC unless it says)."""
    if _DURATION.match(text):
        return int(time.time() * 1000) - duration_ms(text)
    if text.strip().isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected 2h, epoch ms or an ISO 8601 time, got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def add_parser(actions: argparse._SubParsersAction[argparse.ArgumentParser], master: str) -> None:
    """Add ``audit`` to ``rill spark``'s actions."""
    p = actions.add_parser(
        "audit", help="check the producers' audit events against the messages present",
        description="Read the audit events the producers sent (producer setting audit.topic) and count, per "
                    "topic and window, the messages they were acknowledged (expected) and those still in the "
                    "topic inside the acknowledged offset ranges (found). Exits 3 when any are missing.")
    add_broker_arguments(p)
    p.add_argument("-t", "--topic", action="append", required=True, type=topic_name,
                   help="a topic to audit (repeatable)")
    p.add_argument("--audit-topic", required=True, type=topic_name, metavar="NAME",
                   help="the topic the producers send their audit events to")
    p.add_argument("--window", type=duration_ms, default=60_000, metavar="DURATION",
                   help="window of the report, e.g. 1m or 1h (default 1m); a multiple of audit.window.ms")
    p.add_argument("--since", type=since_ms, default=None, metavar="WHEN",
                   help="only windows starting at or after WHEN: 2h (ago), epoch ms, or an ISO 8601 time")
    p.add_argument("--master", default=master, help=f"Spark master (default: {master})")
    p.set_defaults(run=run_audit)


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def run_audit(args: argparse.Namespace) -> int:
    try:
        from rill.client.spark import spark_session
        from rill.client.spark.audit import audit
    except ImportError as exc:
        raise CliError(f"rill spark needs pyspark and pyarrow: pip install 'rill[spark]' ({exc})") from exc
    from rill.client.cli.spark import _check_topics, spark_security
    from rill.client.cli.spark_errors import expected_failure

    host, port = args.broker
    security = spark_security(args)
    _check_topics(host, port, [*args.topic, args.audit_topic], args.timeout, args)
    try:
        spark = spark_session(args.master, "rill spark audit")
        spark.sparkContext.setLogLevel("ERROR")
        report = audit(spark, f"{host}:{port}", args.topic, args.audit_topic, args.window, args.since,
                       security=security)
    except Exception as exc:
        failure = expected_failure(exc, "audit")
        if failure is None:
            raise
        raise failure from exc
    width = max([len("topic"), *(len(w.topic) for w in report.windows)])
    print(f"{'topic':<{width}}  {'window start (UTC)':<23}  {'producers':>9}  {'expected':>10}  {'found':>10}  "
          f"{'missing':>9}")
    for w in report.windows:
        print(f"{w.topic:<{width}}  {_when(w.window_start_ms):<23}  {w.producers:>9}  {w.expected:>10}  "
              f"{w.found:>10}  {w.missing:>9}{'  MISSING' if w.missing else ''}")
    expected = sum(w.expected for w in report.windows)
    short = [w for w in report.windows if w.missing]
    print(f"{len(report.windows)} window(s) of {args.window} ms from {report.events} audit event(s): "
          f"{expected} expected, {report.missing} missing in {len(short)} window(s)", file=sys.stderr)
    if report.bad_events:
        print(f"rill: warning: {report.bad_events} message(s) of {args.audit_topic} are not audit events "
              f"(ignored)", file=sys.stderr)
    unaudited = sorted(set(args.topic) - {w.topic for w in report.windows})
    if unaudited:
        print(f"rill: warning: no audit events for {', '.join(unaudited)}", file=sys.stderr)
    return EXIT_MISSING if report.missing else 0
