"""``rill groups list|describe|delete`` and ``rill topics describe`` against an in-process broker, through
``--bootstrap-server`` (the data port: the gRPC port comes from METADATA) and the explicit ``--grpc``."""

from __future__ import annotations

import pytest

from rill.broker.testing import RunningBroker
from rill.client.cli.main import main
from rill.client.grpc_client import AdminClient
from rill.client.protocol.requests import PartitionAck
from rill.client.simple import SimpleProducer
from rill.v1 import coordinator_pb2 as pb


@pytest.fixture
def seeded(broker: RunningBroker) -> tuple[RunningBroker, PartitionAck]:
    """A topic with two partitions, and a group that committed the end of partition 0."""
    with SimpleProducer(broker.host, broker.port) as producer:
        first = producer.send("events", [b"a", b"b"], partition=0)
        producer.send("events", [b"c"], partition=1)
    with AdminClient(broker.grpc_address) as admin:
        assert admin.create_group("app", ["events"]).error_code == pb.NONE
        assert admin.commit("app", [("events", 0, first.next_offset)]).error_code == pb.NONE
    return broker, first


def test_groups_list_and_describe_show_lag(seeded: tuple[RunningBroker, PartitionAck],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """list names the group and its topic; describe prints committed offsets and lag per partition."""
    broker, first = seeded
    assert main(["groups", "list", "--bootstrap-server", broker.address]) == 0
    assert f"app\tEmpty\t0\t0\tevents\t0@127.0.0.1:{broker.port}" in capsys.readouterr().out
    assert main(["groups", "describe", "app", "--bootstrap-server", broker.address]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines() if line.startswith("events\t")]
    by_partition = {int(r[1]): r for r in rows}
    assert by_partition[0][2] == str(first.next_offset) and by_partition[0][4] == "0"
    assert by_partition[1][2] == "-" and int(by_partition[1][4]) > 0


def test_the_explicit_grpc_flag_still_works(seeded: tuple[RunningBroker, PartitionAck],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """--grpc HOST:PORT names the gRPC address directly (Kafka's --group flag names the group)."""
    broker, _ = seeded
    assert main(["groups", "describe", "--group", "app", "--grpc", broker.grpc_address]) == 0
    assert capsys.readouterr().out.startswith("Group app: Empty")


def test_groups_delete(seeded: tuple[RunningBroker, PartitionAck], capsys: pytest.CaptureFixture[str]) -> None:
    """delete removes a group without members; an unknown one is reported with exit status 1 (describe too)."""
    broker, _ = seeded
    assert main(["groups", "delete", "app", "--bootstrap-server", broker.address]) == 0
    assert "Deleted group app." in capsys.readouterr().out
    assert main(["groups", "delete", "app", "--bootstrap-server", broker.address]) == 1
    assert "Group app not deleted: GROUP_NOT_FOUND" in capsys.readouterr().out
    assert main(["groups", "describe", "app", "--bootstrap-server", broker.address]) == 1
    assert "group 'app' does not exist" in capsys.readouterr().err


def test_topics_describe(seeded: tuple[RunningBroker, PartitionAck], capsys: pytest.CaptureFixture[str]) -> None:
    """topics describe prints each partition's start and end offsets."""
    broker, first = seeded
    assert main(["topics", "describe", "--topic", "events", "--bootstrap-server", broker.address]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows[0][:4] == ["events", "0", "0", str(first.next_offset)]
