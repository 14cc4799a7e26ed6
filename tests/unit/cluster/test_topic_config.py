"""Topic settings changed at run time without a broker: validation, the conditional write, the controller's reload."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kazoo.exceptions import BadVersionError, NoNodeError
from kazoo.protocol.states import EventType, KeeperState, WatchedEvent, ZnodeStat

from rill.broker.cluster.controller_context import ControllerContext, unclean_for
from rill.broker.cluster.partition_states import ControllerEpoch
from rill.broker.cluster.topic_config import (InvalidTopicConfig, NotReplicatedTopic, alter_topic_config,
                                              alteration_problem, altered)
from rill.broker.cluster.topic_config_watch import changed_topic, reload_topic_config
from rill.client.cli.main import build_parser
from rill.client.cli.topics_alter import change_lines, configs_text
from rill.client.cli.topics import describe_row
from rill.client.zookeeper.replica_layout import PartitionState, TopicReplicas
from rill.v1 import admin_pb2 as apb

PATH = "/rill/topics/orders"
REPLICAS = ((1, 2, 3), (2, 3, 1))
MIN_ISR = "min.insync.replicas"
UNCLEAN = "unclean.leader.election.enable"


def _stat(version: int) -> ZnodeStat:
    return ZnodeStat(0, 0, 0, 0, version, 0, 0, 0, 0, 0, 0)


class FakeZk:
    """One znode per path with ZooKeeper's versioned set; ``before_set`` runs ahead of each set (a racing writer)."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, int]] = {}
        self.sets = 0
        self.before_set: Callable[[], None] = lambda: None
        self.watches: list[Any] = []

    def get(self, path: str, watch: Any = None) -> tuple[bytes, ZnodeStat]:
        if path not in self.nodes:
            raise NoNodeError()
        if watch is not None:
            self.watches.append(watch)
        data, version = self.nodes[path]
        return data, _stat(version)

    def set(self, path: str, data: bytes, version: int = -1) -> ZnodeStat:
        self.before_set()
        if path not in self.nodes:
            raise NoNodeError()
        current = self.nodes[path][1]
        if version not in (-1, current):
            raise BadVersionError()
        self.sets += 1
        self.nodes[path] = (data, current + 1)
        return _stat(current + 1)

    def config(self, path: str = PATH) -> dict[str, str]:
        return dict(TopicReplicas.decode(self.nodes[path][0]).config)


def _zk(config: dict[str, str] | None = None) -> FakeZk:
    zk = FakeZk()
    zk.nodes[PATH] = (TopicReplicas(REPLICAS, config or {}).encode(), 4)
    return zk


def test_alteration_problem_names_each_refusal() -> None:
    """Unknown keys (set or deleted), bad values, a key set and deleted, and an empty change are refused."""
    assert alteration_problem({MIN_ISR: "3"}, [UNCLEAN]) is None
    assert "unknown topic setting 'retention.hours'" in (alteration_problem({"retention.hours": "1"}, []) or "")
    assert "unknown topic setting 'segment.ms'" in (alteration_problem({}, ["segment.ms"]) or "")
    assert "min.insync.replicas='0' must be a whole number >= 1" in (alteration_problem({MIN_ISR: "0"}, []) or "")
    assert "must be true or false" in (alteration_problem({UNCLEAN: "yes"}, []) or "")
    assert "both set and deleted" in (alteration_problem({MIN_ISR: "2"}, [MIN_ISR]) or "")
    assert "nothing to alter" in (alteration_problem({}, []) or "")


def test_altered_sets_deletes_and_keeps_the_rest() -> None:
    """Set keys are replaced (values stripped), deleted ones removed (absent ones are no-ops), others kept."""
    assert altered({MIN_ISR: "2", UNCLEAN: "true"}, {MIN_ISR: " 3 "}, ["absent"]) == {MIN_ISR: "3", UNCLEAN: "true"}
    assert altered({MIN_ISR: "2", UNCLEAN: "true"}, {}, [UNCLEAN]) == {MIN_ISR: "2"}


def test_alter_writes_conditionally_and_reports_before_and_after() -> None:
    """One versioned write of the new config; the assignment is kept; before and after are returned."""
    zk = _zk({MIN_ISR: "2"})
    change = alter_topic_config(zk, "orders", {UNCLEAN: "true"}, [])  # type: ignore[arg-type]
    assert (dict(change.before), dict(change.after)) == ({MIN_ISR: "2"}, {MIN_ISR: "2", UNCLEAN: "true"})
    assert zk.nodes[PATH][1] == 5 and TopicReplicas.decode(zk.nodes[PATH][0]).replicas == REPLICAS


def test_alter_that_changes_nothing_writes_nothing() -> None:
    """Setting a value the topic has, or deleting one it lacks, leaves the node (and its version) alone."""
    zk = _zk({MIN_ISR: "2"})
    change = alter_topic_config(zk, "orders", {MIN_ISR: "2"}, [UNCLEAN])  # type: ignore[arg-type]
    assert not change.changed and zk.sets == 0 and zk.nodes[PATH][1] == 4


def test_alter_losing_the_race_rereads_and_keeps_the_other_writers_key() -> None:
    """A concurrent alter of another key between our read and our write: BadVersion, re-read, both survive."""
    zk = _zk()

    def racing_writer() -> None:
        zk.before_set = lambda: None
        alter_topic_config(zk, "orders", {UNCLEAN: "true"}, [])  # type: ignore[arg-type]

    zk.before_set = racing_writer
    change = alter_topic_config(zk, "orders", {MIN_ISR: "3"}, [])  # type: ignore[arg-type]
    assert zk.config() == {MIN_ISR: "3", UNCLEAN: "true"} == dict(change.after)
    assert dict(change.before) == {UNCLEAN: "true"}  # what the winning attempt read


def test_alter_gives_up_after_losing_every_attempt() -> None:
    """Another writer winning every time: TimeoutError, and our change is not written."""
    zk = _zk()

    def bump() -> None:
        data, version = zk.nodes[PATH]
        zk.nodes[PATH] = (data, version + 1)

    zk.before_set = bump
    with pytest.raises(TimeoutError):
        alter_topic_config(zk, "orders", {MIN_ISR: "3"}, [], max_attempts=3)  # type: ignore[arg-type]
    assert zk.config() == {}


def test_alter_refuses_bad_input_and_missing_or_unreplicated_topics() -> None:
    """Validation before any read; a missing topic and a 0.7 partition map are NotReplicatedTopic."""
    zk = _zk()
    with pytest.raises(InvalidTopicConfig, match="unknown topic setting 'retention.hours'"):
        alter_topic_config(zk, "orders", {"retention.hours": "1"}, [])  # type: ignore[arg-type]
    with pytest.raises(NotReplicatedTopic, match="does not exist"):
        alter_topic_config(zk, "gone", {MIN_ISR: "2"}, [])  # type: ignore[arg-type]
    zk.nodes["/rill/topics/old"] = (b'{"partitions":{"1":2}}', 0)
    with pytest.raises(NotReplicatedTopic, match="not a replicated topic"):
        alter_topic_config(zk, "old", {MIN_ISR: "2"}, [])  # type: ignore[arg-type]
    assert zk.sets == 0


def _event(kind: EventType, path: str) -> WatchedEvent:
    return WatchedEvent(kind, KeeperState.CONNECTED, path)


def test_changed_topic_reads_data_changes_of_topic_nodes_only() -> None:
    """A CHANGED event on /rill/topics/[t] names t; deletions and deeper or other paths name nothing."""
    assert changed_topic(_event(EventType.CHANGED, PATH)) == "orders"
    assert changed_topic(_event(EventType.DELETED, PATH)) is None
    assert changed_topic(_event(EventType.CHANGED, PATH + "/partitions/0/state")) is None
    assert changed_topic(_event(EventType.CHANGED, "/rill/controller")) is None


def _context(config: dict[str, str]) -> ControllerContext:
    ctx = ControllerContext(ControllerEpoch(3, 2))
    states = {p: (PartitionState(r[0], 1, r, 3), 0) for p, r in enumerate(REPLICAS)}
    ctx.add_topic("orders", TopicReplicas(REPLICAS, config), states)
    return ctx


def test_reload_keeps_the_new_settings_and_returns_the_partitions_to_send() -> None:
    """After a config change the context holds it (roles carry min.insync, elections see unclean), with a watch."""
    ctx, zk = _context({MIN_ISR: "2"}), _zk({MIN_ISR: "3", UNCLEAN: "true"})
    watch = object()
    keys = reload_topic_config(zk, ctx, "orders", watch)  # type: ignore[arg-type]
    assert keys == [("orders", 0), ("orders", 1)] and zk.watches == [watch]
    assert [r.min_insync for r in ctx.roles(keys)] == [3, 3] and unclean_for(ctx.topics["orders"], False)
    assert reload_topic_config(zk, ctx, "orders", watch) == []  # type: ignore[arg-type]  # nothing new to send
    assert reload_topic_config(zk, ctx, "unknown", watch) == []  # type: ignore[arg-type]


def test_alter_cli_prints_what_changed_and_describe_shows_configs() -> None:
    """The alter output names each changed key with (default) for an absent one; CONFIGS renders k=v or -."""
    assert change_lines("orders", {MIN_ISR: "2", UNCLEAN: "true"}, {MIN_ISR: "3"}) == [
        "Altered config of topic orders:", "  min.insync.replicas: 2 -> 3",
        "  unclean.leader.election.enable: true -> (default)"]
    assert change_lines("orders", {MIN_ISR: "2"}, {MIN_ISR: "2"}) == ["Config of topic orders unchanged."]
    assert configs_text({UNCLEAN: "true", MIN_ISR: "3"}) == "min.insync.replicas=3,unclean.leader.election.enable=true"
    assert configs_text({}) == "-"
    topic = apb.TopicDescription(topic="orders")
    row = apb.PartitionDescription(partition=0, leader=1, replicas=[1, 2], isr=[1, 2])
    assert describe_row(topic, row, True) == "orders\t0\t0\t0\t0\t1\t1,2\t1,2\t0"


def test_alter_parser_takes_repeated_config_and_delete_config() -> None:
    """topics alter: --topic, repeated --config KEY=VALUE and --delete-config KEY, --grpc."""
    args = build_parser().parse_args(["topics", "alter", "--topic", "t", "--config", "min.insync.replicas=3",
                                      "--config", "unclean.leader.election.enable=true", "--delete-config", "x",
                                      "--grpc", "h:9"])
    assert (args.topic, args.config, args.delete_config, args.grpc) == (
        "t", [(MIN_ISR, "3"), (UNCLEAN, "true")], ["x"], "h:9")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["topics", "alter", "--config", "min.insync.replicas=3"])  # no --topic
