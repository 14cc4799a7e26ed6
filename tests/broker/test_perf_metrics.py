"""``rill perf metrics`` (metrics on against off, as ratios) and ``rill perf scrape`` (scrape time, series and
the stall of another process's requests) end to end with small figures, on brokers of their own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rill.client.cli.main import main


def perf_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code = main(["perf", *argv, "--json", "-q"])
    out, err = capsys.readouterr()
    assert code == 0, err
    result: dict[str, Any] = json.loads(out)
    assert result["command"].startswith(f"rill perf {argv[0]} ")
    return result


@pytest.mark.slow
def test_perf_metrics_compares_metrics_on_and_off(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One small round: every figure on both sides as a positive ratio, broker CPU per MB on both, the "on"
    broker scraped during its runs at the interval given, and the work directory removed."""
    result = perf_json(capsys, "metrics", "--dir", str(tmp_path), "--rounds", "1", "--messages", "20000", "--rate",
                       "500", "--seconds", "1", "--idle-wait", "0", "--scrape-interval", "0.2")
    [comparison] = result["comparisons"]
    assert (comparison["a"], comparison["b"]) == ("metrics off", "metrics on")
    rows = comparison["rows"]
    assert [(r["benchmark"], r["metric"]) for r in rows] == [
        ("produce", "messages_per_s"), ("consume", "messages_per_s"), ("e2e", "p50_ms"), ("e2e", "p99_ms")]
    assert all(r["ratio"] > 0 and r["metrics off"] > 0 and r["metrics on"] > 0 and r["other_cores"] >= 0
               for r in rows)
    assert set(rows[0]["broker_cpu_us_per_mb"]) == {"metrics off", "metrics on"}
    assert result["scrapes"] >= 2 and 0 < result["scrape_ms_p50"] <= result["scrape_ms_max"]
    assert result["scrape_series"] > 100
    assert list(tmp_path.iterdir()) == []


def test_perf_scrape_measures_a_small_broker(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """50 partitions in two topics, 30 of them with the group's committed offsets: the series include one lag
    series per group partition; scrape, parse and probe figures are positive; the goal holds."""
    result = perf_json(capsys, "scrape", "--dir", str(tmp_path), "--partitions", "50", "--per-topic", "25",
                       "--group-partitions", "30", "--scrapes", "2", "--idle-seconds", "0.5")
    [row] = result["rows"]
    assert (row["partitions"], row["topics"], row["group_partitions"]) == (50, 2, 30)
    assert row["group_lag_series"] == 30
    assert row["series"] == row["series_counted"] > 3 * 50
    assert row["text_bytes"] > row["gzip_bytes"] > 0
    assert 0 < row["scrape_ms_p50"] <= row["scrape_ms_max"] and row["parse_ms"] > 0
    assert row["broker_cpu_ms_per_scrape"] >= 0 and row["stalled_scrape_ms_max"] > 0
    assert row["probe_idle_requests"] > 0 and row["probe_scraping_requests"] > 0 and row["probe_idle_per_s"] > 0
    assert 0 < row["probe_idle_ms_p50"] <= row["probe_idle_ms_max"]
    assert row["goal_holds"] is True
    assert list(tmp_path.iterdir()) == []
