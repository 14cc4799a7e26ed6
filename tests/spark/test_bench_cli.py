"""The Spark benchmarks as a user runs them (``rill spark bench-read`` and ``bench-stream``), small."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from rill.broker.testing import RunningBroker
from tests.spark.helpers import create, produce

pytestmark = pytest.mark.slow


def rill(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "rill.client.cli.main", *args], capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    return done.stderr.decode()


def figure(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match, text
    return float(match.group(1).replace(",", ""))


def test_bench_read_reports_every_row(broker: RunningBroker, tmp_path: Path) -> None:
    """bench-read writes every message to Parquet and reports that many rows and a positive rate."""
    create(broker, "bench", 2)
    for p in range(2):
        produce(broker, "bench", p, [b"v" * 100] * 3000)
    err = rill("spark", "bench-read", "-b", broker.address, "-t", "bench", "--out", str(tmp_path / "pq"))
    assert figure(r"([\d,]+) rows in", err) == 6000 and figure(r"([\d,]+) rows/s", err) > 0


def test_bench_stream_reports_records_and_latency(broker: RunningBroker) -> None:
    """bench-stream at a steady rate keeps up (records/s near the rate) and reports latency quantiles."""
    err = rill("spark", "bench-stream", "-b", broker.address, "-t", "live", "--partitions", "2", "--rate", "2000",
               "--seconds", "6", "--warmup", "4", "--trigger-ms", "500")
    assert 1000 < figure(r"([\d,]+) records/s", err) < 3000
    p50, p99 = figure(r"p50 ([\d,]+) ms", err), figure(r"p99 ([\d,]+) ms", err)
    assert 0 <= p50 <= p99 < 10_000
    assert "command: rill spark bench-stream" in err
