"""Admin DeleteTopic and CreatePartitions on a broker without ZooKeeper (Kafka 0.7-style topics only).

The broker deletes its own partitions of the topic: the logs leave the data directory (set
aside, then removed in the background), clients get UnknownTopic, and a topic created again
under the name starts empty. Internal names are refused, and so is everything with
``delete.topic.enable=false``; CreatePartitions has no replicated topic to grow here.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from rill.broker.testing import RunningBroker, running_broker
from rill.client.cli.main import main
from rill.client.errors import UnknownTopic
from rill.client.grpc_client import AdminClient
from rill.client.simple import SimpleConsumer, SimpleProducer
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import coordinator_pb2_grpc as pb_grpc


def partition_dirs(data_dir: Path, topic: str) -> list[str]:
    """The directories of ``topic``'s partitions, those set aside for deletion included."""
    return sorted(name for name in os.listdir(data_dir) if name.startswith(f"{topic}-"))


def wait_until(check: object, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_delete_removes_the_logs_and_a_new_topic_of_that_name_starts_empty(tmp_path: Path) -> None:
    """Deleting a 0.7-style topic unpublishes and removes its two partitions (UnknownTopic from then on); a produce
    afterwards auto-creates it anew, with the first message at offset 0."""
    data = tmp_path / "d"
    with running_broker(data, num_partitions=2) as b:
        with SimpleProducer(b.host, b.port) as producer:
            for p in (0, 1):
                producer.send("events", [b"old-%d" % i for i in range(50)], p)
        assert partition_dirs(data, "events") == ["events-0", "events-1"]
        groups = coordinator_stub(b)
        assert groups.CreateGroup(pb.CreateGroupRequest(consumer_group="old", topics=["events"]),
                                  timeout=10).error_code == pb.NONE
        assert groups.CommitOffsets(pb.CommitOffsetsRequest(consumer_group="old", offsets=[
            pb.PartitionOffset(topic="events", partition=1, offset=0)]), timeout=10).error_code == pb.NONE
        with AdminClient(b.grpc_address, timeout=10) as admin:
            deleted = admin.delete_topic("events")
            assert (deleted.error_code, deleted.replicated, deleted.partitions) == (pb.NONE, False, 2)
            assert "events" not in b.broker.logs.topics()
            wait_until(lambda: partition_dirs(data, "events") == [], "the directories removed")
            with SimpleConsumer(b.host, b.port, timeout=5) as consumer, pytest.raises(UnknownTopic):
                consumer.topics(["events"])
            again = admin.delete_topic("events")
            assert again.error_code == pb.UNKNOWN_TOPIC_OR_PARTITION
        # the group's offsets of the deleted topic went with it (Kafka's way)
        wait_until(lambda: not groups.FetchOffsets(pb.FetchOffsetsRequest(consumer_group="old"), timeout=10).offsets,
                   "the deleted topic's offsets to go")
        with SimpleProducer(b.host, b.port) as producer:
            assert producer.send("events", [b"new"], 0).first_offset == 0
        with SimpleConsumer(b.host, b.port, timeout=5) as consumer:
            assert [m.value for m in consumer.fetch("events", 0, 0)] == [b"new"]
            assert consumer.latest_offset("events", 1) == 0


def test_refusals_internal_names_no_cluster_and_deletion_disabled(tmp_path: Path) -> None:
    """``__rill`` names are INVALID_TOPIC for both RPCs, CreatePartitions needs a cluster (INVALID_REQUEST), and with
    delete.topic.enable=false DeleteTopic is TOPIC_DELETION_DISABLED and the topic stays."""
    with running_broker(tmp_path / "d", num_partitions=1, delete_topic_enable=False) as b:
        with SimpleProducer(b.host, b.port) as producer:
            producer.send("kept", [b"x"], 0)
        with AdminClient(b.grpc_address, timeout=10) as admin:
            assert admin.delete_topic("__rill_groups").error_code == pb.INVALID_TOPIC
            assert admin.create_partitions("__rill_groups", 60).error_code == pb.INVALID_TOPIC
            assert admin.create_partitions("kept", 3).error_code == pb.INVALID_REQUEST
            refused = admin.delete_topic("kept")
            assert refused.error_code == pb.TOPIC_DELETION_DISABLED, refused.error_message
        assert b.broker.logs.topics().get("kept") == 1


def test_rill_topics_delete_prints_what_it_deleted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI names the partitions deleted on the broker asked, and exits 1 with the broker's reason otherwise."""
    with running_broker(tmp_path / "d", num_partitions=3) as b:
        with SimpleProducer(b.host, b.port) as producer:
            producer.send("logs", [b"x"], 0)
        assert main(["topics", "delete", "--grpc", b.grpc_address, "--topic", "logs"]) == 0
        out = capsys.readouterr().out
        assert out.startswith("Deleted topic logs: the 3 partitions of this broker")
        assert main(["topics", "delete", "--grpc", b.grpc_address, "--topic", "logs"]) == 1
        assert "UNKNOWN_TOPIC_OR_PARTITION" in capsys.readouterr().err


def coordinator_stub(b: RunningBroker) -> Any:
    return pb_grpc.GroupCoordinatorStub(grpc.insecure_channel(b.grpc_address))  # type: ignore[no-untyped-call]
