"""``rill spark load``: the offline loader (topics into Parquet, offsets stored with the data).

Needs the ``spark`` extra (pyspark, pyarrow) and Java 17. Spark runs in local mode in
this process (``--master``, default ``local[2]``). Progress goes to stderr; the summary
line too. See docs/spark.md.

``--command-config FILE`` (security.protocol, ssl.*, sasl.*) secures every connection:
the topic check, the Spark job (as the source's ``kafka.``-prefixed options) and the
coordinator commit.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, TextIO

import structlog

from rill.client.cli import spark_audit, spark_stream_bench
from rill.client.cli.common import CliError, add_broker_arguments, positive_int, topic_name, unknown_topic
from rill.client.cli.spark_errors import expected_failure

log = structlog.get_logger(__name__)

DEFAULT_MASTER = "local[2]"
BAR_WIDTH = 30


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("spark", help="Spark jobs: the offline Parquet loader, the audit job",
                              description="Spark jobs over rill topics (local mode).")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    load = actions.add_parser(
        "load", help="load topics into Parquet, continuing from the offsets stored with the output",
        description="Load topics into Parquet under OUT (partitioned by run, topic, partition and date). Each "
                    "run commits its data and offsets with one rename, so re-running after a failure or a kill "
                    "neither duplicates nor loses a message. One loader per OUT: a run holds OUT/_lock, and a "
                    "second loader started meanwhile fails at once. Progress is committed to the group coordinator.")
    add_broker_arguments(load)
    load.add_argument("-t", "--topic", action="append", required=True, type=topic_name,
                      help="a topic to load (repeatable)")
    load.add_argument("--out", required=True, metavar="DIR", help="the output directory")
    load.add_argument("--until", choices=["latest"], default="latest",
                      help="load up to the log ends as of the start of the run (the only choice today)")
    load.add_argument("--group", default=None, metavar="NAME",
                      help="consumer group whose committed offsets track the load (default: rill-spark-load)")
    load.add_argument("--master", default=DEFAULT_MASTER, help=f"Spark master (default: {DEFAULT_MASTER})")
    load.add_argument("--split-bytes", type=positive_int, default=None, metavar="BYTES",
                      help="split a partition into Spark tasks of about this many bytes (default: 256 MiB)")
    load.add_argument("--fail-on-data-loss", type=_true_or_false, default=True, metavar="true|false",
                      help="true (default, as Spark's failOnDataLoss): stop when retention deleted offsets not "
                           "loaded yet; false: load on from the log start, naming the skipped range in a warning")
    load.add_argument("--no-progress", action="store_true", help="do not draw the progress bar")
    load.set_defaults(run=run_load)
    bench = actions.add_parser(
        "bench-read", help="benchmark: batch-read topics into Parquet and print rows per second",
        description="Read the whole of the topics through the rill source and write them to Parquet under "
                    "OUT (replaced), timing the Spark job. Prints the figures and the command line.")
    add_broker_arguments(bench)
    bench.add_argument("-t", "--topic", action="append", required=True, type=topic_name)
    bench.add_argument("--out", required=True, metavar="DIR")
    bench.add_argument("--master", default=DEFAULT_MASTER)
    bench.add_argument("--split-bytes", type=positive_int, default=None, metavar="BYTES")
    bench.add_argument("--fetch-bytes", type=positive_int, default=None, metavar="BYTES",
                       help="bytes per fetch (one Arrow batch each; default 4 MiB)")
    bench.set_defaults(run=run_bench)
    spark_audit.add_parser(actions, DEFAULT_MASTER)
    spark_stream_bench.add_parser(actions, DEFAULT_MASTER)


def _true_or_false(text: str) -> bool:
    if text.strip().lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.strip().lower() == "true"


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


class ProgressBar:
    """Draws ``[#####.....] tasks 3/8  1.2 GB / 2.0 GB`` on ``stream``: redrawn in place on a
    terminal, one line per tenth of the work otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.last_tenth = -1
        self.drawn = False

    def __call__(self, p: Any) -> None:
        fraction = p.tasks_done / p.tasks if p.tasks else 1.0
        filled = int(BAR_WIDTH * fraction)
        line = (f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] tasks {p.tasks_done}/{p.tasks}  "
                f"{_size(p.bytes_done)} / {_size(p.bytes_total)}")
        if self.tty:
            self.stream.write("\r" + line)
            self.drawn = True
        elif int(fraction * 10) != self.last_tenth:
            self.last_tenth = int(fraction * 10)
            self.stream.write(line + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()


def spark_security(args: argparse.Namespace) -> dict[str, str]:
    """The ``--command-config`` settings as the rill source takes them (client key -> string), checked;
    empty without the option. Raises CliError as rill.client.cli.command_config.security_of does."""
    from rill.client.cli.command_config import read_command_config, security_of

    security_of(args)  # only security settings, with usable values
    path = getattr(args, "command_config", None)
    if not path:
        return {}
    return {key: (str(value).lower() if isinstance(value, bool) else str(value))
            for key, value in read_command_config(path).items()}


def _check_topics(host: str, port: int, topics: list[str], timeout: float, args: argparse.Namespace) -> None:
    from rill.client.cli.command_config import security_of
    from rill.client.simple import SimpleConsumer

    with SimpleConsumer(host, port, timeout=timeout, security=security_of(args)) as client:
        known = client.topics()
    missing = [t for t in topics if t not in known]
    if missing:
        raise unknown_topic(missing[0])


def run_load(args: argparse.Namespace) -> int:
    try:
        from rill.client.spark import spark_session
        from rill.client.spark.load import DEFAULT_GROUP, load
        from rill.client.spark.options import DEFAULT_SPLIT_BYTES
        from rill.client.spark.output_lock import OutputLock
    except ImportError as exc:
        raise CliError(f"rill spark needs pyspark and pyarrow: pip install 'rill[spark]' ({exc})") from exc
    host, port = args.broker
    began = time.monotonic()
    security = spark_security(args)
    _check_topics(host, port, args.topic, args.timeout, args)  # before Spark starts: a typo fails in a second
    bar = None if args.no_progress else ProgressBar(sys.stderr)
    try:
        with OutputLock.acquire(args.out) as lock:  # before Spark starts too: a second loader fails at once
            spark = spark_session(args.master, "rill spark load")
            spark.sparkContext.setLogLevel("ERROR")
            result = load(spark, f"{host}:{port}", args.topic, args.out, group=args.group or DEFAULT_GROUP,
                          split_bytes=args.split_bytes or DEFAULT_SPLIT_BYTES, progress=bar, security=security,
                          lock=lock, fail_on_data_loss=args.fail_on_data_loss)
    except Exception as exc:
        failure = expected_failure(exc, "load")
        if failure is None:
            raise
        raise failure from exc
    finally:
        if bar is not None:
            bar.finish()
    elapsed = time.monotonic() - began
    if result.run is None:
        print(f"nothing new to load from {len(args.topic)} topic(s) ({result.partitions} partitions)",
              file=sys.stderr)
    else:
        print(f"run {result.run}: loaded {result.rows} messages ({_size(result.bytes)}) from {result.partitions} "
              f"partitions into {result.run_dir} in {elapsed:.1f} s", file=sys.stderr)
    if result.coordinator_error:
        print(f"rill: warning: the data is committed, but committing the offsets to the group coordinator "
              f"failed: {result.coordinator_error}", file=sys.stderr)
    return 0


def run_bench(args: argparse.Namespace) -> int:
    from rill.client.cli.common import command_line
    from rill.client.spark import spark_session

    host, port = args.broker
    security = spark_security(args)
    _check_topics(host, port, args.topic, args.timeout, args)
    spark = spark_session(args.master, "rill spark bench-read")
    spark.sparkContext.setLogLevel("ERROR")
    reader = (spark.read.format("rill").option("bootstrap", f"{host}:{port}")
              .option("subscribe", ",".join(args.topic)).options(**{f"kafka.{k}": v for k, v in security.items()}))
    if args.split_bytes:
        reader = reader.option("splitBytes", str(args.split_bytes))
    if args.fetch_bytes:
        reader = reader.option("fetchBytes", str(args.fetch_bytes))
    began = time.monotonic()
    df = reader.load()
    tasks = df.rdd.getNumPartitions()
    df.write.mode("overwrite").parquet(args.out)
    seconds = time.monotonic() - began
    rows = spark.read.parquet(args.out).count()
    print(f"rill spark bench-read: {rows:,} rows in {seconds:.2f} s on {args.master}, {tasks} tasks", file=sys.stderr)
    print(f"  {rows / seconds:,.0f} rows/s into Parquet", file=sys.stderr)
    print(f"  command: {command_line(args.argv)}", file=sys.stderr)
    return 0
