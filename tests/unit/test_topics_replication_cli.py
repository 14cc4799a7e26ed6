"""The pieces of replicated-topic administration that need no broker: settings checks and describe rows."""

from __future__ import annotations

import argparse

import pytest

from rill.broker.cluster.topic_config import topic_config_problem
from rill.client.cli.main import build_parser
from rill.client.cli.topics import config_entry, describe_row
from rill.v1 import admin_pb2 as apb


def test_topic_config_problem_accepts_known_settings_only() -> None:
    """Known settings with good values pass; unknown keys, bad values and settings on factor 1 are named."""
    assert topic_config_problem({"min.insync.replicas": "2", "unclean.leader.election.enable": "TRUE"}, 3) is None
    assert topic_config_problem({}, 1) is None
    assert "unknown topic setting 'retention.hours'" in (topic_config_problem({"retention.hours": "1"}, 3) or "")
    assert "min.insync.replicas='0'" in (topic_config_problem({"min.insync.replicas": "0"}, 3) or "")
    assert "must be true or false" in (topic_config_problem({"unclean.leader.election.enable": "yes"}, 3) or "")
    assert "replicated topics only" in (topic_config_problem({"min.insync.replicas": "1"}, 1) or "")


def test_config_entry_parses_key_value() -> None:
    """--config takes KEY=VALUE (the value may hold '='), and refuses text without a key."""
    assert config_entry("min.insync.replicas=2") == ("min.insync.replicas", "2")
    assert config_entry("a=b=c") == ("a", "b=c")
    with pytest.raises(argparse.ArgumentTypeError):
        config_entry("novalue")
    with pytest.raises(argparse.ArgumentTypeError):
        config_entry("=2")


def test_create_parser_takes_replication_flags() -> None:
    """topics create accepts --replication-factor, repeated --config and --grpc; describe --under-replicated."""
    args = build_parser().parse_args(["topics", "create", "--topic", "t", "--partitions", "3", "--replication-factor",
                                      "3", "--config", "min.insync.replicas=2", "--config",
                                      "unclean.leader.election.enable=false", "--grpc", "h:9"])
    assert (args.replication_factor, args.grpc) == (3, "h:9")
    assert dict(args.config) == {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
    assert build_parser().parse_args(["topics", "describe", "--under-replicated"]).under_replicated


def test_describe_row_adds_replica_columns() -> None:
    """A replicated row ends with replicas, ISR and epoch; a 0.7 row beside it gets dashes; alone, no extra columns."""
    topic = apb.TopicDescription(topic="t")
    replicated = apb.PartitionDescription(partition=1, start_offset=0, end_offset=9, size_bytes=9, leader=2,
                                          replicas=[2, 3, 1], isr=[2, 1], leader_epoch=4, under_replicated=True)
    plain = apb.PartitionDescription(partition=0, start_offset=0, end_offset=5, size_bytes=5, leader=1)
    assert describe_row(topic, replicated, True) == "t\t1\t0\t9\t9\t2\t2,3,1\t2,1\t4"
    assert describe_row(topic, plain, True) == "t\t0\t0\t5\t5\t1\t-\t-\t-"
    assert describe_row(topic, plain, False) == "t\t0\t0\t5\t5\t1"
