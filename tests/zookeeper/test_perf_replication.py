"""``rill perf replication``, ``failover`` and ``elections`` start a cluster of their own and report its figures.

Small runs (few messages, short phases): what is checked is that each harness runs the
cluster through its phases and reports figures that follow from what it did, not the
figures' size (docs/benchmarks.md holds those, measured on a quiet machine).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rill.client.cli.main import main
from rill.client.cli.perf.replication import behind_ms, log_end


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    # one __rill_groups partition keeps the test clusters light (a cluster's default is 50 x 3 replicas)
    assert main(["perf", *argv, "--set", "offsets.topic.num.partitions=1", "--json", "-q"]) == 0
    return dict(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))


def test_log_end_is_the_last_segment_base_plus_its_size(tmp_path: Path) -> None:
    (tmp_path / f"{0:020d}.log").write_bytes(b"x" * 100)
    (tmp_path / f"{100:020d}.log").write_bytes(b"y" * 42)
    (tmp_path / f"{100:020d}.index").write_bytes(b"z" * 999)
    assert log_end(str(tmp_path)) == 142
    assert log_end(str(tmp_path / "missing")) == 0


def test_lag_in_time_is_when_the_leader_passed_the_followers_end() -> None:
    """The leader's end at 1.0 s was 100, at 1.1 s 200: a follower at 150 has what the leader had at 1.05 s."""
    times, ends = [1.0, 1.1, 1.2], [100, 200, 300]
    assert behind_ms(times, ends, 150, now=1.25) == pytest.approx(200.0)
    assert behind_ms(times, ends, 300, now=1.25) == 0.0
    assert behind_ms(times, ends, 50, now=1.25) == pytest.approx(250.0)  # behind the first sample: at least


@pytest.mark.slow
def test_replication_reports_the_ratio_lag_and_latency_of_its_own_cluster(
        tmp_path: Path, zk_connect: str, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, "replication", "--zookeeper", zk_connect, "--dir", str(tmp_path), "--messages", "20000",
                      "--rounds", "2", "--lag-rate", "3000", "--lag-seconds", "1", "--latency-rate", "500",
                      "--latency-seconds", "1")
    rounds = result["rounds"]
    assert isinstance(rounds, list) and len(rounds) == 2
    assert all(r["acks_all"] > 0 and r["acks_append"] > 0 for r in rounds)
    ratios = sorted(r["acks_all"] / r["acks_append"] for r in rounds)
    assert result["ratio"] == pytest.approx((ratios[0] + ratios[1]) / 2)  # the median of two
    lag, latency = result["lag"], result["latency"]
    assert isinstance(lag, dict) and isinstance(latency, dict)
    assert lag["samples"] > 0 and 0 <= lag["bytes_p50"] <= lag["bytes_p99"] <= lag["bytes_max"]
    assert lag["rate"] == 3000 and 2500 <= lag["messages"] <= 3000  # --lag-rate instead of half the median
    assert 400 <= latency["messages"] <= 500  # one second at 500 messages/s
    assert 0 < latency["p50_ms"] <= latency["p99_ms"] <= latency["max_ms"]
    assert os.listdir(tmp_path) == []  # the cluster's data went with it


@pytest.mark.slow
def test_failover_measures_a_controlled_shutdown_and_a_kill(tmp_path: Path, zk_connect: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, "failover", "--zookeeper", zk_connect, "--dir", str(tmp_path), "--rounds", "1",
                      "--set", "zookeeper.session.timeout.ms=2000")
    rounds = result["rounds"]
    assert isinstance(rounds, list) and [r["fault"] for r in rounds] == ["kill9", "sigterm"]
    kill9, sigterm = rounds
    assert not kill9["controller"] and not sigterm["controller"]
    # After kill -9 nothing moves until ZooKeeper expires the session; a graceful stop moves leadership first.
    assert kill9["unavailable_ms"] >= 1000
    assert sigterm["unavailable_ms"] < kill9["unavailable_ms"]


@pytest.mark.slow
def test_elections_moves_every_leadership_of_a_killed_broker_and_takes_it_back(
        tmp_path: Path, zk_connect: str, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, "elections", "--zookeeper", zk_connect, "--dir", str(tmp_path), "--partitions", "30",
                      "--messages-per-partition", "5", "--set", "zookeeper.session.timeout.ms=2000")
    elections, restart = result["elections"], result["restart"]
    assert isinstance(elections, dict) and isinstance(restart, dict)
    assert elections["victim"] != elections["controller"]
    assert 0 < elections["victim_led"] < 30
    # every partition's ISR lost the dead broker, its leaderships moved: the topic's 30 and __rill_groups' one
    assert elections["changed"] == 31
    assert elections["offline"] == 0
    assert 0 < elections["controller_written_ms"] <= elections["controller_total_ms"]
    assert elections["kill_to_all_led_s"] >= 1.0  # the session had to expire first
    assert restart["start_s"] > 0 and restart["in_sync_s"] >= 0 and restart["rss_mb"] > 0


def test_replication_phases_are_checked_before_anything_starts(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["perf", "replication", "--dir", str(tmp_path), "--phases", "lag"]) != 0
    assert "needs the throughput runs, or --lag-rate" in capsys.readouterr().err
    assert main(["perf", "replication", "--dir", str(tmp_path), "--phases", "speed"]) != 0
    assert os.listdir(tmp_path) == []
