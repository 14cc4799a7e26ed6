"""``rill perf reassignment`` on a small partition: it fills, moves under the throttle, and reports its figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rill.client.cli.main import main


@pytest.mark.slow
def test_reassignment_moves_the_partition_under_the_throttle_and_reports_latencies(
        tmp_path: Path, zk_connect: str, capsys: pytest.CaptureFixture[str]) -> None:
    """2 MB at 1 MB/s: the move takes over a second and a half, onto the broker that had no replica, and the
    probe has latencies before and during it."""
    assert main(["perf", "reassignment", "--zookeeper", zk_connect, "--dir", str(tmp_path), "--bytes", "2000000",
                 "--set", "offsets.topic.num.partitions=1",
                 "--throttle", "1000000", "--before-seconds", "1", "--rate", "50", "--json", "-q"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["move_seconds"] >= 1.5
    assert len(set(result["replicas"]) | set(result["target"])) == 4 and result["replicas"][0] not in result["target"]
    assert result["before"]["count"] > 0 and result["during"]["count"] > 0
    assert result["during"]["p99_ms"] >= result["during"]["p50_ms"] > 0
