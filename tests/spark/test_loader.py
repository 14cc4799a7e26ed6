"""The offline loader as a user runs it: ``rill spark load`` in its own process, killed with
SIGKILL mid-run and run again, its Parquet compared row for row with the topic; the
Parquet it writes, read with pyarrow."""

from __future__ import annotations

import datetime
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from rill.broker.testing import RunningBroker, running_broker
from rill.client.grpc_client import AdminClient
from rill.client.protocol.messages import CODEC_GZIP
from rill.client.simple import SimpleConsumer, SimpleProducer
from rill.client.spark.load import TIMESTAMP_TYPE, load
from rill.client.spark.output import OutputDir
from rill.client.spark.output_lock import LOCK_FILE
from tests.spark.helpers import create, produce, read, rows_of, topic_rows

pytestmark = pytest.mark.slow

TOPIC = "orders"
PARTITIONS = 3


def loader(broker: RunningBroker, out: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "rill.client.cli.main", "spark", "load", "--broker", broker.address,
               "--topic", TOPIC, "--out", str(out), "--group", "orders-loader", "--split-bytes", "400000"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def finish(proc: subprocess.Popen[bytes]) -> str:
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    return err.decode()


def kill_mid_run(proc: subprocess.Popen[bytes], out: Path, rng: random.Random) -> None:
    """SIGKILL the driver once its run has begun (staging exists), at a random moment; then its JVM.
    The killed loader held the output's lock: the lock file names it still."""
    deadline = time.monotonic() + 60
    while not (out / "_staging").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(rng.uniform(0.0, 2.0))
    assert json.loads((out / LOCK_FILE).read_text())["pid"] == proc.pid
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the Spark JVM the driver started, in the same new session
    except ProcessLookupError:
        pass


def produce_orders(broker: RunningBroker, round_: int, count: int) -> None:
    for p in range(PARTITIONS):
        produce(broker, TOPIC, p, [f"order-{round_}-{p}-{i:06d}-".encode() * 4 for i in range(count)])


def test_loader_killed_and_rerun_matches_topic(spark: Any, broker: RunningBroker, tmp_path: Path) -> None:
    """Runs killed with SIGKILL at random points, then re-run (the killed run's lock is no obstacle), leave
    Parquet equal to the topic: no duplicate, no loss."""
    rng = random.Random(int(os.environ.get("RILL_TEST_SEED", time.time())))
    days = {time.strftime("%Y-%m-%d", time.gmtime())}
    out = tmp_path / "out"
    create(broker, TOPIC, PARTITIONS)
    produce_orders(broker, 1, 20000)
    kill_mid_run(loader(broker, out), out, rng)
    finish(loader(broker, out))
    produce_orders(broker, 2, 5000)
    kill_mid_run(loader(broker, out), out, rng)
    summary = finish(loader(broker, out))
    assert "loaded" in summary
    assert "nothing new" in finish(loader(broker, out))

    expected = sorted(topic_rows(broker, TOPIC, PARTITIONS))
    loaded = spark.read.parquet(str(out))
    assert rows_of(loaded) == expected
    days.add(time.strftime("%Y-%m-%d", time.gmtime()))
    stamped = loaded.selectExpr("CAST(date AS STRING) AS date", "timestamp IS NULL AS unknown").distinct().collect()
    assert {r.date for r in stamped} <= days and not any(r.unknown for r in stamped)  # append dates
    assert not (out / "_staging").exists()
    manifest = OutputDir(out).latest()
    with SimpleConsumer(broker.host, broker.port) as consumer:
        ends = {str(p): consumer.latest_offset(TOPIC, p) for p in range(PARTITIONS)}
    assert manifest is not None and manifest.end == {TOPIC: ends}
    with AdminClient(broker.grpc_address) as admin:
        committed = admin.fetch_offsets("orders-loader").offsets
    assert {(o.topic, o.partition): o.offset for o in committed} == {
        (TOPIC, int(p)): o for p, o in manifest.end[TOPIC].items()}


def test_loader_cli_errors(broker: RunningBroker, tmp_path: Path) -> None:
    """An unknown topic is one error line and exit code 1, and nothing is written."""
    proc = subprocess.run([sys.executable, "-m", "rill.client.cli.main", "spark", "load", "--broker", broker.address,
                           "--topic", "absent", "--out", str(tmp_path / "out")], capture_output=True, timeout=120)
    assert proc.returncode == 1
    assert "rill: error: topic 'absent' does not exist" in proc.stderr.decode()
    assert not (tmp_path / "out").exists()


def test_loader_date_is_the_utc_append_date(spark: Any) -> None:
    """The date partition is the UTC date of the append time whatever the session time zone; today if unknown."""
    from pyspark.sql import functions as F

    from rill.client.spark.load import _utc_date

    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")  # 2020-01-01 23:30 UTC is Jan 2 in Tokyo
    try:
        df = spark.createDataFrame([(1577921400000000,), (None,)], "us long").selectExpr(
            "timestamp_micros(us) AS timestamp")
        dates = [r.d for r in df.select(_utc_date(F).alias("d")).collect()]
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    assert dates[0] == "2020-01-01"
    assert dates[1] in {time.strftime("%Y-%m-%d", time.gmtime(time.time() + d)) for d in (-5, 0)}


def test_loaded_parquet_has_utc_micros_timestamps_and_offset_index(spark: Any, broker: RunningBroker,
                                                                    tmp_path: Path) -> None:
    """The loader writes timestamp as TIMESTAMP(MICROS, UTC), equal to the source's append times, and offsetIndex
    numbering a gzip wrapper's messages; the session's outputTimestampType is as it was."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    create(broker, TOPIC, 1)
    produce(broker, TOPIC, 0, [b"plain"])
    with SimpleProducer(broker.host, broker.port, codec=CODEC_GZIP) as producer:
        producer.send(TOPIC, [b"z0", b"z1", b"z2"], partition=0)
    conf_before = spark.conf.get(TIMESTAMP_TYPE[0])
    result = load(spark, broker.address, [TOPIC], tmp_path / "out")
    assert spark.conf.get(TIMESTAMP_TYPE[0]) == conf_before != TIMESTAMP_TYPE[1]
    assert result.run_dir is not None
    table = pq.read_table(next(result.run_dir.rglob("*.parquet")))  # one task, so one file
    assert table.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert table.schema.field("offsetIndex").type == pa.int32()
    source = read(spark, broker, subscribe=TOPIC).selectExpr("offset", "offsetIndex", "unix_micros(timestamp) AS us")
    appended = {(r.offset, r.offsetIndex): r.us for r in source.collect()}
    loaded = table.select(["offset", "offsetIndex", "timestamp", "value"]).to_pylist()
    assert [(r["offsetIndex"], r["value"]) for r in loaded] == [(0, b"plain"), (0, b"z0"), (1, b"z1"), (2, b"z2")]
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    assert {(r["offset"], r["offsetIndex"]): (r["timestamp"] - epoch) // datetime.timedelta(microseconds=1)
            for r in loaded} == appended


def test_loader_across_a_retention_gap(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Offsets deleted before they were loaded stop `rill spark load` with one error line naming
    --fail-on-data-loss; with `--fail-on-data-loss false` the run loads on from the log start, a spark.data_loss
    warning naming the skipped range; `rill groups describe` shows the loader's group with the loader's -b."""
    from rill.client.cli.main import main

    with running_broker(tmp_path / "data", num_partitions=1, log_segment_bytes=1024, log_retention_bytes=2048,
                        log_retention_check_interval_ms=100) as b:
        create(b, "gap", 1)
        produce(b, "gap", 0, [b"a" * 90] * 12)
        out = tmp_path / "out"
        cli = ["spark", "load", "-b", b.address, "--topic", "gap", "--out", str(out), "--no-progress"]
        assert main(cli) == 0
        for _ in range(4):
            produce(b, "gap", 0, [b"b" * 90] * 10)  # 10 per append: segments roll between appends
        deadline = time.monotonic() + 20
        with SimpleConsumer(b.host, b.port) as consumer:
            while consumer.earliest_offset("gap", 0) <= 1200:
                assert time.monotonic() < deadline, "retention did not run"
                time.sleep(0.05)
        capsys.readouterr()
        assert main(cli) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("rill: error: gap-0: offsets [1200, ")
        assert "--fail-on-data-loss false" in err[0]
        assert main([*cli, "--fail-on-data-loss", "false"]) == 0
        warning = [line for line in capsys.readouterr().err.splitlines() if "spark.data_loss" in line]
        assert len(warning) == 1 and "skipped_from=1200" in warning[0] and "topic=gap" in warning[0]
        loaded = spark.read.parquet(str(out)).orderBy("offset").collect()
        assert [bytes(r.value) for r in loaded] == [b"a" * 90] * 12 + [v for _, _, v in topic_rows(b, "gap", 1)]
        capsys.readouterr()
        assert main(["groups", "describe", "rill-spark-load", "-b", b.address]) == 0
        assert "gap\t0\t" in capsys.readouterr().out
