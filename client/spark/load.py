"""The offline loader (seed 002, "Offline Data Load"): topics into Parquet, exactly once.

One run: read where the newest committed run stopped (or each log's start), up to the
log ends at the start of the run, through the ``rill`` source (one Spark task per
partition or byte range); write Parquet partitioned by topic, partition and date into
the staging area; commit data and offsets with one rename (rill.client.spark.output);
then commit the same offsets to the group coordinator under ``group`` so that
``rill groups describe GROUP`` shows the loader's lag. The coordinator's copy is only
for monitoring: the offsets stored with the output are the truth, so a run killed
between the two commits loses nothing and the next run fixes the coordinator's copy.

One loader per output: a run holds the output's lock (``OUT/_lock``,
rill.client.spark.output_lock) from before it reads the newest run's offsets until its
commit, and a second loader fails at once with :class:`OutputLocked`. The commit reads
the newest run again and refuses (:class:`OutputMoved`) if another loader committed
meanwhile, for file systems where the lock means nothing.

``date`` is the UTC date each message was appended to the log (from its ``timestamp``,
the broker's append time; the run's date for the rare message whose time is unknown).
Messages of a compressed wrapper share its offset; ``offsetIndex`` numbers them, so
``(topic, partition, offset, offsetIndex)`` is unique. ``timestamp`` is written as
Parquet's ``TIMESTAMP(MICROS, isAdjustedToUTC=true)``, not Spark's legacy INT96, so every
Parquet reader sees the same instant.

``security`` holds the client security settings (``security.protocol``, ``ssl.*``,
``sasl.*``, as strings): the planning connections, the Spark job's tasks (as the
source's ``kafka.``-prefixed options) and the coordinator commit all use them.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from rill.client.grpc_client import AdminClient, error_name
from rill.client.spark.batch import plan_ranges
from rill.client.spark.data_loss import DataLossError, skip_deleted
from rill.client.spark.options import DEFAULT_SPLIT_BYTES, SourceOptionError
from rill.client.spark.output import OutputDir, OutputMoved, RunManifest
from rill.client.spark.output_lock import OutputLock, OutputLocked
from rill.client.spark.planning import Cluster, TopicPartition, cluster
from rill.client.spark.security_options import PREFIX
from rill.client.spark.stream import from_json_offsets, to_json_offsets
from rill.v1 import coordinator_pb2 as pb

__all__ = ["LoadResult", "Progress", "load", "DEFAULT_GROUP", "OutputLocked", "OutputMoved", "DataLossError"]

log = structlog.get_logger(__name__)

DEFAULT_GROUP = "rill-spark-load"
LOADER_HINT = ("the output cannot be complete; to load on from the log start, leaving the deleted range out (a "
               "spark.data_loss warning names it), run with --fail-on-data-loss false (load(..., "
               "fail_on_data_loss=False))")
COLUMNS = ("topic", "partition", "offset", "offsetIndex", "value", "timestamp")  # and date, from timestamp
# The loader's Parquet timestamps: INT64 microseconds marked as UTC instants, not INT96.
TIMESTAMP_TYPE = ("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")


@dataclass(frozen=True, slots=True)
class Progress:
    """Where a run is: Spark tasks (partitions or byte ranges) done of all, and the bytes they cover
    (``bytes_done`` counts finished tasks at the average task size)."""

    tasks_done: int
    tasks: int
    bytes_done: int
    bytes_total: int


@dataclass(frozen=True, slots=True)
class LoadResult:
    """What a run did: ``run`` is None when there was nothing new (no run directory is written)."""

    run: int | None
    run_dir: Path | None
    partitions: int
    rows: int
    bytes: int
    seconds: float
    coordinator_error: str | None


def _plan(c: Cluster, topics: Sequence[str], stored: dict[TopicPartition, int],
          fail_on_data_loss: bool = True) -> dict[TopicPartition, tuple[int, int]]:
    """(start, end) per partition: from the stored offset (or the log start) to the log end now; a stored
    offset retention deleted fails (DataLossError) or, without ``fail_on_data_loss``, starts at the log start."""
    counts = c.refresh(tuple(topics), None)
    plan: dict[TopicPartition, tuple[int, int]] = {}
    for topic, n in counts.items():
        for p in range(n):
            low, high = c.bounds(TopicPartition(topic, p))
            start = skip_deleted(TopicPartition(topic, p), stored.get(TopicPartition(topic, p), low), low,
                                 fail=fail_on_data_loss, hint=LOADER_HINT)
            if start > high:
                raise SourceOptionError(f"{topic}-{p}: the output holds offsets up to {start}, past the log end "
                                        f"{high} (was the topic recreated?)")
            plan[TopicPartition(topic, p)] = (start, high)
    return plan


def _commit_group(c: Cluster, group: str, offsets: dict[TopicPartition, int]) -> str | None:
    """Commit ``offsets`` under ``group``; the error as text, or None."""
    try:
        with AdminClient(c.grpc_address(), timeout=10.0, client_id="rill-spark-load", security=c.security) as admin:
            response = admin.commit(group, [(t, p, o) for (t, p), o in sorted(offsets.items())])
    except Exception as exc:  # monitoring only: the load itself is committed
        log.warning("spark.load_group_commit_failed", group=group, error=str(exc))
        return str(exc)
    if response.error_code != pb.NONE:
        log.warning("spark.load_group_commit_refused", group=group, error=error_name(response.error_code))
        return error_name(response.error_code)
    return None


def _watch(spark: Any, tasks: int, total: int, report: Callable[[Progress], None],
           stop: threading.Event) -> threading.Thread:
    """A thread reporting finished tasks of the running stages every half second."""
    tracker = spark.sparkContext.statusTracker()

    def loop() -> None:
        while not stop.wait(0.5):
            done = 0
            for stage in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage)
                if info is not None:
                    done = max(done, info.numCompletedTasks)
            done = min(done, tasks)
            report(Progress(done, tasks, total * done // max(tasks, 1), total))

    thread = threading.Thread(target=loop, name="rill-load-progress", daemon=True)
    thread.start()
    return thread


def load(spark: Any, bootstrap: str, topics: Sequence[str], out: str | Path, *, group: str = DEFAULT_GROUP,
         split_bytes: int = DEFAULT_SPLIT_BYTES, progress: Callable[[Progress], None] | None = None,
         security: Mapping[str, str] | None = None, lock: OutputLock | None = None,
         fail_on_data_loss: bool = True) -> LoadResult:
    """Load ``topics`` up to their current log ends into ``out`` (see the module doc), connecting with the
    ``security`` settings (client key -> string; None: PLAINTEXT).

    ``lock`` is the output's lock when the caller already holds it (``rill spark load`` takes it before it
    starts Spark, so a second loader fails in a second); None: this call takes it and releases it on return.
    ``fail_on_data_loss`` (Spark's ``failOnDataLoss``): with False, a partition whose unloaded offsets
    retention deleted is loaded on from its log start, the deleted range named in a ``spark.data_loss``
    warning (also for a range deleted while the run reads it).

    Raises:
        OutputLocked: another loader holds the output's lock; nothing is read or written.
        OutputMoved: another loader committed a run into ``out`` while this one ran; nothing is committed.
        DataLossError: retention deleted offsets not loaded yet, and ``fail_on_data_loss``; nothing is written.
        SourceOptionError: an unknown topic, data deleted before it was loaded, an unreachable broker, or
            security settings that are malformed or refused.
        ValueError: the output directory's newest offsets file is unreadable.
    """
    if lock is not None:
        return _load(spark, bootstrap, topics, OutputDir(out), group, split_bytes, progress, security or {},
                     fail_on_data_loss)
    with OutputLock.acquire(out):
        return _load(spark, bootstrap, topics, OutputDir(out), group, split_bytes, progress, security or {},
                     fail_on_data_loss)


def _load(spark: Any, bootstrap: str, topics: Sequence[str], output: OutputDir, group: str, split_bytes: int,
          progress: Callable[[Progress], None] | None, security: Mapping[str, str],
          fail_on_data_loss: bool = True) -> LoadResult:
    """:func:`load`, under the output's lock."""
    began, started_ms = time.monotonic(), int(time.time() * 1000)
    latest = output.latest()
    stored = from_json_offsets(latest.end) if latest is not None else {}
    with cluster(bootstrap, security) as c:
        plan = _plan(c, topics, stored, fail_on_data_loss)
        ends = {**stored, **{tp: end for tp, (_, end) in plan.items()}}
        _commit_group(c, group, {tp: start for tp, (start, _) in plan.items()})  # lag is visible while loading
        todo = {tp: r for tp, r in plan.items() if r[1] > r[0]}
        total = sum(end - start for start, end in todo.values())
        tasks = len(plan_ranges(c, todo, split_bytes))
        if not todo:
            error = _commit_group(c, group, {tp: end for tp, (_, end) in plan.items()})
            log.info("spark.load_nothing_new", partitions=len(plan), group=group)
            return LoadResult(None, None, len(plan), 0, 0, time.monotonic() - began, error)
        run, staged = output.begin()
        log.info("spark.load_started", run=run, partitions=len(todo), tasks=tasks, bytes=total, out=str(output.root))
        rows = _write(spark, bootstrap, todo, staged, split_bytes, tasks, total, progress, security,
                      fail_on_data_loss)
        manifest = RunManifest(run, started_ms, rows, to_json_offsets({tp: s for tp, (s, _) in todo.items()}),
                               to_json_offsets(ends))
        run_dir = output.commit(staged, manifest, latest)
        error = _commit_group(c, group, {tp: end for tp, (_, end) in plan.items()})
    seconds = time.monotonic() - began
    log.info("spark.load_committed", run=run, rows=rows, bytes=total, seconds=round(seconds, 3), dir=str(run_dir))
    return LoadResult(run, run_dir, len(todo), rows, total, seconds, error)


def _utc_date(F: Any) -> Any:
    """The UTC date (yyyy-MM-dd) of ``timestamp``, whatever the session's time zone; else today's."""
    day = F.expr("date_add(DATE'1970-01-01', CAST(floor(unix_micros(timestamp) / 86400000000) AS INT))")
    return F.coalesce(day.cast("string"), F.lit(time.strftime("%Y-%m-%d", time.gmtime())))


def _write(spark: Any, bootstrap: str, todo: dict[TopicPartition, tuple[int, int]],
           staged: Path, split_bytes: int, tasks: int, total: int,
           progress: Callable[[Progress], None] | None, security: Mapping[str, str],
           fail_on_data_loss: bool = True) -> int:
    """Run the Spark job writing ``todo`` into ``staged``; the number of rows written."""
    from pyspark.sql import functions as F

    starting = to_json_offsets({tp: s for tp, (s, _) in todo.items()})
    ending = to_json_offsets({tp: e for tp, (_, e) in todo.items()})
    assign = {topic: [p for t, p in sorted(todo) if t == topic] for topic in sorted({t for t, _ in todo})}
    df = (spark.read.format("rill").option("bootstrap", bootstrap).option("assign", json.dumps(assign))
          .option("startingOffsets", json.dumps(starting)).option("endingOffsets", json.dumps(ending))
          .option("splitBytes", str(split_bytes)).option("failOnDataLoss", str(fail_on_data_loss).lower())
          .options(**{PREFIX + k: v for k, v in security.items()}).load()
          .select(*COLUMNS, _utc_date(F).alias("date")))
    stop = threading.Event()
    watcher = _watch(spark, tasks, total, progress, stop) if progress is not None else None
    key, value = TIMESTAMP_TYPE
    before = spark.conf.get(key, None)  # pyspark 4.0 and 4.1 ignore it as a write option: set it for the write
    spark.conf.set(key, value)
    try:
        df.write.partitionBy("topic", "partition", "date").parquet(str(staged))
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)
        stop.set()
        if watcher is not None:
            watcher.join()
    if progress is not None:
        progress(Progress(tasks, tasks, total, total))
    return int(spark.read.parquet(str(staged)).count())
