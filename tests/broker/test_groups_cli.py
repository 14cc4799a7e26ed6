"""``rill groups ...`` and ``rill topics describe`` against an in-process broker's gRPC port."""

from __future__ import annotations

import pytest

from rill.client.grpc_client import AdminClient
from rill.client.cli.groups import parse_duration_ms, parse_time_ms
from rill.client.cli.main import main
from rill.client.simple import SimpleProducer
from rill.v1 import coordinator_pb2 as pb


@pytest.fixture
def seeded(broker):
    """A topic with two partitions, and a group that committed the end of partition 0."""
    with SimpleProducer(broker.host, broker.port) as producer:
        first = producer.send("events", [b"a", b"b"], partition=0)
        producer.send("events", [b"c"], partition=1)
    with AdminClient(broker.grpc_address) as admin:
        assert admin.create_group("app", ["events"]).error_code == pb.NONE
        assert admin.commit("app", [("events", 0, first.next_offset)]).error_code == pb.NONE
    return broker, first


def test_groups_list_and_describe_show_lag(seeded, capsys) -> None:
    """list names the group; describe prints committed offsets and lag per partition."""
    broker, first = seeded
    assert main(["groups", "list", "--grpc", broker.grpc_address]) == 0
    assert "app\tEmpty" in capsys.readouterr().out
    assert main(["groups", "describe", "app", "--grpc", broker.grpc_address]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines() if line.startswith("events\t")]
    by_partition = {int(r[1]): r for r in rows}
    assert by_partition[0][2] == str(first.next_offset) and by_partition[0][4] == "0"
    assert by_partition[1][2] == "-" and int(by_partition[1][4]) > 0


def test_rewind_dry_run_moves_nothing_then_rewind_moves(seeded, capsys) -> None:
    """--dry-run prints the target offsets without storing them; without it they are stored."""
    broker, first = seeded
    args = ["groups", "rewind", "app", "--topic", "events", "--to-earliest", "--grpc", broker.grpc_address]
    assert main([*args, "--dry-run"]) == 0
    assert "Would set 2 offset(s)" in capsys.readouterr().out
    with AdminClient(broker.grpc_address) as admin:
        before = {o.partition: o.offset for o in admin.fetch_offsets("app").offsets}
    assert before[0] == first.next_offset
    assert main(args) == 0
    with AdminClient(broker.grpc_address) as admin:
        after = {o.partition: o.offset for o in admin.fetch_offsets("app").offsets}
    assert after[0] == 0


def test_rewind_errors_are_clear(seeded, capsys) -> None:
    """A rewind past the log end fails with the error named, and --to-offset needs --partition."""
    broker, _ = seeded
    assert main(["groups", "rewind", "app", "--topic", "events", "--partition", "0", "--to-offset", "999999",
                 "--grpc", broker.grpc_address]) == 1
    assert "OFFSET_OUT_OF_RANGE" in capsys.readouterr().out
    assert main(["groups", "rewind", "app", "--topic", "events", "--to-offset", "0",
                 "--grpc", broker.grpc_address]) == 2


def test_groups_delete(seeded, capsys) -> None:
    """delete removes a group without members; an unknown one is reported."""
    broker, _ = seeded
    assert main(["groups", "delete", "app", "--grpc", broker.grpc_address]) == 0
    assert "Deleted group app." in capsys.readouterr().out
    assert main(["groups", "delete", "app", "--grpc", broker.grpc_address]) == 1


def test_topics_describe(seeded, capsys) -> None:
    """topics describe prints each partition's start and end offsets."""
    broker, first = seeded
    assert main(["topics", "describe", "--topic", "events", "--grpc", broker.grpc_address]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows[0][:4] == ["events", "0", "0", str(first.next_offset)]


def test_time_arguments() -> None:
    """ISO 8601 times (naive = UTC) and durations like -1h become epoch milliseconds."""
    assert parse_time_ms("1970-01-01T00:00:01Z") == 1000
    assert parse_time_ms("1970-01-01T00:00:02") == 2000
    assert parse_duration_ms("-1h", now=7200.0) == 3_600_000
    assert parse_duration_ms("30m", now=3600.0) == 1_800_000
