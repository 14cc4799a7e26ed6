"""``rill perf connections | partitions | scrub`` run as a user runs them, on brokers they start themselves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _perf(tmp_path: Path, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "rill.client.cli.main", "perf", *args, "--dir", str(tmp_path),
                           "--json", "-q"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_perf_connections_reports_rss_and_a_new_clients_round_trip(tmp_path: Path) -> None:
    """perf connections gives the RSS added by idle connections and a new client's METADATA round trip for each count."""
    result = _perf(tmp_path, "connections", "--connections", "50,200", "--probes", "3")
    assert [r["connections"] for r in result["rows"]] == [50, 200]
    assert all(r["metadata_max_ms"] >= r["metadata_p50_ms"] > 0 and r["rss_added_mb"] < 100 for r in result["rows"])
    assert result["command"].startswith("rill perf connections --connections 50,200")


def test_perf_partitions_reports_creation_stop_and_starts(tmp_path: Path) -> None:
    """perf partitions creates, stops, restarts and kill-9-restarts a broker per total, and reports each time."""
    result = _perf(tmp_path, "partitions", "--partitions", "120", "--per-topic", "50")
    [row] = result["rows"]
    assert row["partitions"] == 120 and row["descriptors"] < 100 and row["probe_max_ms"] > 0
    assert all(row[k] > 0 for k in ("create_s", "stop_s", "clean_start_s", "start_after_kill_s"))
    assert list(tmp_path.iterdir()) == []  # its data directories are removed


def test_perf_scrub_reports_speed_and_an_ingest_ratio(tmp_path: Path) -> None:
    """perf scrub measures one unthrottled pass and ingest with the scrubber off and on."""
    result = _perf(tmp_path, "scrub", "--mb", "20", "--rounds", "1")
    assert result["bytes"] >= 15_000_000 and result["mb_per_s"] > 0
    assert len(result["ingest_off"]) == len(result["ingest_on"]) == 1 and result["ingest_ratio_on_off"] > 0


def test_perf_large_requests_reports_the_peak_and_memory_after(tmp_path: Path) -> None:
    """perf large-requests sends concurrent acknowledged produces and reports RSS at the peak and after."""
    result = _perf(tmp_path, "large-requests", "--requests", "3", "--mb", "5")
    assert result["acknowledged"] == 3 and result["request_bytes"] > 4_000_000
    assert result["peak_rss_added_mb"] >= 0 and result["probe_max_ms"] > 0
