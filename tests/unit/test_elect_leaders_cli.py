"""``rill topics elect-leaders`` without a broker: its arguments, and the lines it prints."""

from __future__ import annotations

import pytest

from rill.client.cli.preferred_leaders import result_line, summary
from rill.client.cli.main import build_parser, main
from rill.v1 import admin_pb2 as apb
from rill.v1 import coordinator_pb2 as pb


def test_parser_takes_a_topic_its_partitions_or_all_topics() -> None:
    """--topic with repeatable --partition, or --all-topics (Kafka's --all-topic-partitions); one of them is needed."""
    args = build_parser().parse_args(["topics", "elect-leaders", "--topic", "t", "-p", "0", "-p", "2",
                                      "--election-type", "PREFERRED"])
    assert (args.topic, args.partition, args.all_topics, args.election_type) == ("t", [0, 2], False, "preferred")
    assert build_parser().parse_args(["topics", "elect-leaders", "--all-topic-partitions"]).all_topics
    with pytest.raises(SystemExit):
        build_parser().parse_args(["topics", "elect-leaders"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["topics", "elect-leaders", "--all-topics", "--topic", "t"])


def test_partition_without_topic_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """--partition with --all-topics is a usage error, before anything is asked."""
    assert main(["topics", "elect-leaders", "--all-topics", "--partition", "1", "--grpc", "127.0.0.1:1"]) == 1
    assert "--partition needs --topic" in capsys.readouterr().err


def test_lines_use_kafkas_words() -> None:
    """Elected, already elected and failed partitions each get one line; the summary counts them."""
    results = [apb.PartitionElectionResult(topic="t", partition=0, error_code=pb.NONE, leader=1),
               apb.PartitionElectionResult(topic="t", partition=1, error_code=pb.ELECTION_NOT_NEEDED, leader=2),
               apb.PartitionElectionResult(topic="t", partition=2, error_code=pb.PREFERRED_LEADER_NOT_AVAILABLE,
                                           error_message="preferred replica 1 is not live", leader=3),
               apb.PartitionElectionResult(topic="u", partition=-1, error_code=pb.UNKNOWN_TOPIC_OR_PARTITION,
                                           error_message="u is not a replicated topic", leader=-1)]
    assert [result_line(r) for r in results] == [
        "Successfully completed leader election (PREFERRED) for partition t-0: leader 1",
        "Valid replica already elected for partition t-1: leader 2",
        "Error completing leader election (PREFERRED) for partition t-2: PREFERRED_LEADER_NOT_AVAILABLE: "
        "preferred replica 1 is not live (leader 3)",
        "Error completing leader election (PREFERRED) for partition u: UNKNOWN_TOPIC_OR_PARTITION: "
        "u is not a replicated topic"]
    assert summary(results) == "Summary: 1 elected, 1 already had their preferred leader, 2 failed (4 partitions)."
