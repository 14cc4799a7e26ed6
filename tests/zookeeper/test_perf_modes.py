"""``rill perf commit-modes`` and ``rebalance-modes`` run both modes on a two-broker cluster and report both figures."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from rill.broker.testing import RunningBroker
from rill.client.cli.main import main
from tests.zookeeper.test_broker_registration import zk_broker


def two_brokers(stack: ExitStack, tmp_path: Path, zk_connect: str) -> tuple[RunningBroker, RunningBroker]:
    return (stack.enter_context(zk_broker(tmp_path, zk_connect, broker_id=1)),
            stack.enter_context(zk_broker(tmp_path, zk_connect, broker_id=2)))


def leftover_groups(zk_connect: str) -> list[str]:
    zk = KazooClient(hosts=zk_connect, timeout=10)
    zk.start(timeout=10)
    try:
        return list(zk.get_children("/consumers")) if zk.exists("/consumers") else []
    finally:
        zk.stop()
        zk.close()


def test_commit_modes_reports_both_rates_and_their_ratio(tmp_path: Path, zk_connect: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Both modes commit the same partitions; the JSON and the text carry both rates and the ratio."""
    with ExitStack() as stack:
        b1, _ = two_brokers(stack, tmp_path, zk_connect)
        argv = ["perf", "commit-modes", "--grpc", b1.grpc_address, "--zookeeper", zk_connect,
                "--partitions", "4", "--clients", "2", "--seconds", "0.3"]
        assert main([*argv, "--json"]) == 0
        result = json.loads(capsys.readouterr().out)
        for mode in ("native", "zookeeper"):
            assert result[mode]["offsets_per_s"] > 0
            assert result[mode]["offsets"] == 4 * result[mode]["calls"]
            assert result[mode]["errors"] == 0
        assert result["ratio_native_to_zookeeper"] == pytest.approx(
            result["native"]["offsets_per_s"] / result["zookeeper"]["offsets_per_s"])
        assert main([*argv, "-q"]) == 0
        text = capsys.readouterr().err
        assert "native" in text and "zookeeper" in text and "ratio native / zookeeper" in text
        assert leftover_groups(zk_connect) == []


def test_rebalance_modes_reports_both_times_and_their_ratio(tmp_path: Path, zk_connect: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A small group forms in both modes over partitions of two brokers; both medians and the ratio are reported."""
    with ExitStack() as stack:
        b1, _ = two_brokers(stack, tmp_path, zk_connect)
        assert main(["perf", "rebalance-modes", "--grpc", b1.grpc_address, "--zookeeper", zk_connect,
                     "--members", "3", "--topics", "2", "--partitions", "4", "--rounds", "1",
                     "--heartbeat-interval-ms", "100", "--zk-rebalance-backoff-ms", "100",
                     "--round-timeout", "60", "--json"]) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["brokers"] == 2
        for mode in ("native", "zookeeper"):
            assert result[mode]["median_s"] > 0
            assert len(result[mode]["rounds"]) == 1
        assert result["ratio_zookeeper_to_native"] == pytest.approx(
            result["zookeeper"]["median_s"] / result["native"]["median_s"])
        assert leftover_groups(zk_connect) == []
