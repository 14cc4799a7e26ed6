"""``rill perf group-failover`` and ``group-commits`` start a cluster of their own and report its figures.

Tiny runs (two groups of two members, one kill; one pair of two-second commit runs):
what is checked is that each harness goes through its phases and reports figures that
follow from what it did (no acknowledged commit lost, a recovery that waited for the
dead broker's session to expire, both settings committing), not their size
(docs/benchmarks.md, "Group state on the replicated topic").
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rill.client.cli.main import main
from rill.client.cli.perf.group_failover import choose_victim

SESSION_MS = 2000


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    # one __rill_groups partition keeps the test clusters light (a cluster's default is 50 x 3 replicas)
    assert main(["perf", *argv, "--set", "offsets.topic.num.partitions=1", "--json", "-q"]) == 0
    return dict(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))


def test_the_victim_coordinates_the_most_groups_and_is_the_controller_only_as_a_last_resort() -> None:
    """Broker 1 (the controller) coordinates three groups, broker 2 one: broker 2 is killed; alone, the controller."""
    assert choose_victim({"a": 1, "b": 1, "c": 1, "d": 2}, controller=1, live=[1, 2, 3]) == (2, False)
    assert choose_victim({"a": 3, "b": 3, "c": 2}, controller=1, live=[1, 2, 3]) == (3, False)
    assert choose_victim({"a": 1, "b": 1}, controller=1, live=[1, 2, 3]) == (1, True)


@pytest.mark.slow
def test_group_failover_loses_no_acknowledged_commit(tmp_path: Path, zk_connect: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, "group-failover", "--zookeeper", zk_connect, "--dir", str(tmp_path), "--groups", "2",
                      "--members", "2", "--partitions", "4", "--rate", "40", "--rounds", "1", "--settle", "1",
                      "--set", f"zookeeper.session.timeout.ms={SESSION_MS}", "--session-timeout-ms", "6000",
                      "--heartbeat-interval-ms", "500")
    rounds = result["rounds"]
    assert isinstance(rounds, list) and len(rounds) == 1
    (row,) = rounds
    assert row["victim_groups"] >= 1 and row["victim"] in (1, 2, 3)
    assert row["commits_lost"] == 0 and row["partitions_checked"] > 0
    assert result["commits_lost"] == 0 and result["starts_behind_acknowledged"] == 0
    # every member consumed and committed again, after the kill and within the run's bound
    assert 0 < row["consumed_median_s"] <= row["consumed_max_s"] < 60
    assert 0 < row["committed_median_s"] <= row["committed_max_s"] < 60
    # a moved group's commits wait for the dead broker's session to expire (ZooKeeper rounds it to ticks)
    moved = [g for g in row["groups"].values() if g["moved"]]
    assert moved and all(g["committed_max_s"] >= SESSION_MS / 1000 * 0.5 for g in moved)
    assert all(g["coordinator_after"] != row["victim"] for g in row["groups"].values())
    assert isinstance(result["commits"], int) and result["commits"] > 0
    assert os.listdir(tmp_path) == []  # the cluster's data went with it


@pytest.mark.slow
def test_group_commits_compares_the_replicated_topic_with_a_local_log(tmp_path: Path, zk_connect: str,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, "group-commits", "--zookeeper", zk_connect, "--dir", str(tmp_path), "--clients", "2",
                      "--partitions", "10", "--seconds", "2", "--rounds", "1")
    rounds = result["rounds"]
    assert isinstance(rounds, list) and len(rounds) == 1
    (row,) = rounds
    for name in ("replicated", "local"):
        assert row[name]["calls"] > 0 and row[name]["offsets"] == 10 * row[name]["calls"]
        assert row[name]["errors"] == 0
    assert row["ratio"] == pytest.approx(row["replicated"]["calls_per_s"] / row["local"]["calls_per_s"])
    assert result["ratio"] == row["ratio"] > 0
    assert os.listdir(tmp_path) == []


def test_group_failover_refuses_more_members_than_partitions(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["perf", "group-failover", "--dir", str(tmp_path), "--members", "5", "--partitions", "4"]) == 2
    assert "some members would own nothing" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []
