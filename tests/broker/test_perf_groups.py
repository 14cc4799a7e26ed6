"""``rill perf commits|heartbeats|rebalance``: argument parsing, and short runs against an in-process broker."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rill.broker.testing import RunningBroker, running_broker
from rill.client.grpc_client import AdminClient
from rill.client.cli.main import build_parser, main


@pytest.fixture(params=["sync", "aio"])
def any_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningBroker]:
    """A broker with the sync gRPC server, then one with the aio server."""
    with running_broker(tmp_path / "data", grpc_server=request.param) as b:
        yield b


def run_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    result = json.loads(out)
    assert result["command"].startswith("rill perf ")
    return result


def no_groups_left(broker: RunningBroker) -> bool:
    """Every member left and every (ephemeral) group the benchmark made is gone."""
    with AdminClient(broker.grpc_address) as admin:
        return not admin.list_groups().groups_info


def test_arguments_and_defaults() -> None:
    """The defaults are the documented benchmark settings; flags are parsed and checked."""
    parser = build_parser()
    commits = parser.parse_args(["perf", "commits", "--grpc", "127.0.0.1:1"])
    assert (commits.clients, commits.partitions, commits.seconds, commits.shared_group, commits.topic) == \
        (1, 100, 10.0, False, "perf-commits")
    assert commits.grpc == "127.0.0.1:1" and commits.heartbeat_interval_ms == 1000
    shared = parser.parse_args(["perf", "commits", "--clients", "50", "--shared-group", "--seconds", "2.5", "--json"])
    assert (shared.clients, shared.shared_group, shared.seconds, shared.json) == (50, True, 2.5, True)
    beats = parser.parse_args(["perf", "heartbeats", "--members", "8", "--clients", "2"])
    assert (beats.members, beats.clients, beats.seconds) == (8, 2, 10.0)
    rebalance = parser.parse_args(["perf", "rebalance"])
    assert (rebalance.members, rebalance.partitions, rebalance.rounds, rebalance.heartbeat_interval_ms,
            rebalance.session_timeout_ms, rebalance.strategy) == (32, 256, 5, 20, 10_000, "range")


@pytest.mark.parametrize("argv", [
    ["perf", "commits", "--clients", "0"],
    ["perf", "commits", "--seconds", "0"],
    ["perf", "rebalance", "--session-timeout-ms", "5999"],  # below the broker's minimum
    ["perf", "heartbeats", "--members", "-1"],
    ["perf", "rebalance", "--strategy", "nonsense"],
])
def test_bad_arguments_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "error" in capsys.readouterr().err


def test_shared_group_needs_a_partition_per_client(broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["perf", "commits", "--grpc", broker.grpc_address, "--shared-group", "--clients", "5",
                 "--partitions", "4", "--seconds", "0.1"]) == 2
    assert "at least as many partitions" in capsys.readouterr().err


def test_commits_group_per_client(any_broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """Two members in groups of their own each commit all 6 partitions per call; nothing is left behind."""
    result = run_json(capsys, ["perf", "commits", "--grpc", any_broker.grpc_address, "--clients", "2",
                               "--partitions", "6", "--seconds", "0.4", "--json"])
    assert result["mode"] == "group-per-client" and result["groups"] == 2
    assert result["calls"] > 0 and result["errors"] == 0
    assert result["offsets"] == 6 * result["calls"] and result["partitions_per_call"] == 6
    assert result["calls_per_s"] > 0 and 0 < result["p50_ms"] <= result["p99_ms"] <= result["max_ms"]
    assert no_groups_left(any_broker)


def test_commits_shared_group(broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """Three members of one group commit their own two partitions each, and the commits land."""
    result = run_json(capsys, ["perf", "commits", "--grpc", broker.grpc_address, "--clients", "3",
                               "--partitions", "6", "--seconds", "0.4", "--shared-group", "--topic", "shared",
                               "--json"])
    assert result["mode"] == "shared-group" and result["groups"] == 1
    assert result["calls"] > 0 and result["errors"] == 0 and result["partitions_per_call"] == 2
    assert no_groups_left(broker)


def test_heartbeats(any_broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """Four members heartbeated by two threads: every heartbeat answered NONE."""
    result = run_json(capsys, ["perf", "heartbeats", "--grpc", any_broker.grpc_address, "--members", "4",
                               "--clients", "2", "--seconds", "0.4", "--json"])
    assert result["heartbeats"] > 0 and result["heartbeats_per_s"] > 0 and result["errors"] == {}
    assert 0 < result["p50_ms"] <= result["p99_ms"]
    assert no_groups_left(any_broker)


def test_rebalance_rounds_all_complete(any_broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """Each round's leave and join settle with every partition owned once, well within a second."""
    result = run_json(capsys, ["perf", "rebalance", "--grpc", any_broker.grpc_address, "--members", "4",
                               "--partitions", "8", "--rounds", "2", "--heartbeat-interval-ms", "10", "--json"])
    rounds = result["rounds"]
    assert [r["round"] for r in rounds] == [1, 2]
    assert all(0 < r["join_s"] < 1 and 0 < r["leave_s"] < 1 for r in rounds)
    assert rounds[1]["generation"] > rounds[0]["generation"]
    assert result["join_median_s"] <= result["join_max_s"] < 1
    assert no_groups_left(any_broker)


def test_rebalance_text_report(broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """Without --json the figures and the command line go to stderr."""
    assert main(["perf", "rebalance", "--grpc", broker.grpc_address, "--members", "2", "--partitions", "2",
                 "--rounds", "1", "--heartbeat-interval-ms", "10", "--topic", "text"]) == 0
    err = capsys.readouterr().err
    assert "round 1: join" in err and "join median" in err
    assert "command: rill perf rebalance --grpc" in err


def test_unreachable_broker_is_a_clean_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["perf", "heartbeats", "--grpc", "127.0.0.1:1", "--timeout", "0.5", "--seconds", "0.1"]) == 1
    assert "rill: error: gRPC call to 127.0.0.1:1 failed" in capsys.readouterr().err


def test_group_not_found_is_reported(broker: RunningBroker) -> None:
    """A member of a group that does not exist gets a CliError, not a hang (Member.register)."""
    from rill.client.cli.common import CliError
    from rill.client.cli.perf.group_members import Member

    member = Member(broker.grpc_address, "no-such-group", 5.0, 10_000)
    try:
        with pytest.raises(CliError, match="GROUP_NOT_FOUND"):
            member.register()
        assert not member.registering
    finally:
        member.close()
