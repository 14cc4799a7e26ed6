"""Admin CreateTopic's replication factor on a broker without ZooKeeper, and ``rill topics`` there."""

from __future__ import annotations

from pathlib import Path

from rill.broker.testing import RunningBroker, running_broker
from rill.client.cli.main import main
from rill.client.grpc_client import AdminClient
from rill.v1 import coordinator_pb2 as pb


def test_factor_above_one_needs_a_cluster(broker: RunningBroker) -> None:
    """A factor of 2 on a lone broker is INVALID_REPLICATION_FACTOR, counting this broker as the only one."""
    with AdminClient(broker.grpc_address, timeout=10) as admin:
        refused = admin.create_topic("events", 2, replication_factor=2)
        assert refused.error_code == pb.INVALID_REPLICATION_FACTOR
        assert refused.error_message.startswith("replication factor 2 larger than available brokers 1")
        assert "zookeeper.connect" in refused.error_message
        assert not admin.describe_topics(["events"]).topics[0].partitions


def test_factor_one_is_a_kafka07_topic(broker: RunningBroker) -> None:
    """Factor 1 (and the default 0) creates the topic in this broker's storage, described with no replica lists."""
    with AdminClient(broker.grpc_address, timeout=10) as admin:
        one = admin.create_topic("one", 3, replication_factor=1)
        default = admin.create_topic("default", 2)
    assert (one.error_code, one.topic.partition_count, one.topic.replication_factor) == (pb.NONE, 3, 1)
    assert (default.error_code, default.topic.partition_count) == (pb.NONE, 2)
    assert broker.broker.logs.topics()["one"] == 3
    for p in one.topic.partitions:
        assert (list(p.replicas), list(p.isr), p.leader_epoch, p.under_replicated) == ([], [], 0, False)


def test_topic_settings_need_a_replicated_topic(broker: RunningBroker) -> None:
    """Settings with factor 1 are INVALID_CONFIG and create nothing."""
    with AdminClient(broker.grpc_address, timeout=10) as admin:
        refused = admin.create_topic("events", 1, replication_factor=1, config={"min.insync.replicas": "1"})
    assert refused.error_code == pb.INVALID_CONFIG and "replicated topics only" in refused.error_message
    assert "events" not in broker.broker.logs.topics()


def test_default_replication_factor_applies_when_none_is_given(tmp_path: Path) -> None:
    """default.replication.factor=2 makes a CreateTopic without a factor ask for two replicas."""
    with running_broker(tmp_path / "data", default_replication_factor=2) as b, \
            AdminClient(b.grpc_address, timeout=10) as admin:
        refused = admin.create_topic("events", 1)
        assert refused.error_code == pb.INVALID_REPLICATION_FACTOR and "factor 2" in refused.error_message
        assert admin.create_topic("events", 1, replication_factor=1).error_code == pb.NONE


def test_cli_create_with_factor_reports_the_refusal(broker: RunningBroker, capsys) -> None:
    """rill topics create --replication-factor 2 finds the gRPC port through --broker and prints the broker's reason."""
    assert main(["topics", "create", "--broker", broker.address, "--topic", "events", "--partitions", "1",
                 "--replication-factor", "2"]) == 1
    err = capsys.readouterr().err
    assert "INVALID_REPLICATION_FACTOR" in err and "larger than available brokers 1" in err


def test_cli_describe_of_kafka07_topics_keeps_its_columns(broker: RunningBroker, capsys) -> None:
    """rill topics create with factor 1 stays on the data plane; describe prints the six 0.7 columns only."""
    assert main(["topics", "create", "--broker", broker.address, "--topic", "events", "--partitions", "2",
                 "--replication-factor", "1"]) == 0
    assert capsys.readouterr().out == "Created topic events with 2 partitions.\n"
    assert main(["topics", "describe", "--grpc", broker.grpc_address, "--topic", "events"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["TOPIC\tPARTITION\tSTART\tEND\tBYTES\tLEADER", "events\t0\t0\t0\t0\t0", "events\t1\t0\t0\t0\t0"]
    assert main(["topics", "describe", "--grpc", broker.grpc_address, "--under-replicated"]) == 0
    assert capsys.readouterr().out == ""
