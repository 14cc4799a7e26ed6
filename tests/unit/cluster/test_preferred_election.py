"""Preferred leader election without ZooKeeper: who can be elected, the leader imbalance, and the Admin answer."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from rill.broker.cluster.elect_leaders import elect_leaders, requested_partitions
from rill.broker.cluster.preferred_election import (ElectionResult, Outcome, Requested, leader_imbalance,
                                                    rebalance_candidates, why_not_elect)
from rill.broker.cluster.replica_control_servicer import NotController
from rill.broker.config import BrokerConfig, ConfigError
from rill.client.zookeeper.replica_layout import NO_LEADER, PartitionState
from rill.v1 import admin_pb2 as apb
from rill.v1 import coordinator_pb2 as pb


def state(leader: int, isr: tuple[int, ...]) -> PartitionState:
    return PartitionState(leader=leader, leader_epoch=3, isr=isr, controller_epoch=1)


def test_preferred_replica_is_elected_only_when_live_not_stopping_and_in_sync() -> None:
    """The first assigned replica can lead when it is live, not shutting down and in the ISR; the reason otherwise."""
    replicas = (1, 2, 3)
    assert why_not_elect(state(2, (2, 3, 1)), replicas, {1, 2, 3}, set()) is None
    assert why_not_elect(state(1, (1, 2)), replicas, {1, 2, 3}, set()) == (Outcome.ALREADY_PREFERRED, "")
    assert why_not_elect(state(2, (2, 3)), replicas, {2, 3}, set()) == (
        Outcome.NOT_AVAILABLE, "preferred replica 1 is not live")
    assert why_not_elect(state(2, (2, 3, 1)), replicas, {1, 2, 3}, {1}) == (
        Outcome.NOT_AVAILABLE, "preferred replica 1 is shutting down")
    assert why_not_elect(state(2, (2, 3)), replicas, {1, 2, 3}, set()) == (
        Outcome.NOT_AVAILABLE, "preferred replica 1 is not in the ISR [2,3]")


def test_leader_imbalance_counts_per_preferred_broker() -> None:
    """Each broker's ratio is (partitions it is preferred for but does not lead) / (partitions it is preferred for)."""
    partitions = {("t", 0): ((1, 2, 3), state(2, (1, 2, 3))), ("t", 1): ((2, 3, 1), state(2, (1, 2, 3))),
                  ("t", 2): ((3, 1, 2), state(NO_LEADER, (3,))), ("t", 3): ((1, 3, 2), state(1, (1, 3)))}
    imbalance = leader_imbalance(partitions)
    assert sorted(imbalance) == [1, 2, 3]
    assert (imbalance[1].should_lead, imbalance[1].not_led, imbalance[1].ratio) == (2, (("t", 0),), 0.5)
    assert (imbalance[2].not_led, imbalance[2].ratio) == ((), 0.0)
    assert (imbalance[3].not_led, imbalance[3].ratio) == ((("t", 2),), 1.0)  # a leaderless partition counts


def test_rebalance_elects_only_above_the_threshold_and_only_electable_partitions() -> None:
    """Broker 1 leads 1 of its 10 partitions (90% off): the 8 whose ISR holds it are elected, the other is skipped;
    broker 2, at exactly 10% off, is not above the default threshold."""
    partitions = {("a", p): ((1, 2), state(2, (2, 1) if p < 8 else (2,))) for p in range(9)}
    partitions[("a", 9)] = ((1, 2), state(1, (1, 2)))
    partitions.update({("b", p): ((2, 1), state(2 if p else 1, (2, 1))) for p in range(10)})
    keys, over = rebalance_candidates(partitions, {1, 2}, set(), 10)
    assert keys == [("a", p) for p in range(8)]
    assert [(i.broker, i.ratio) for i in over] == [(1, 0.9)]
    assert rebalance_candidates(partitions, {1, 2}, set(), 95) == ([], [])
    assert rebalance_candidates(partitions, {1, 2}, {1}, 10)[0] == []  # broker 1 is shutting down
    assert rebalance_candidates(partitions, {2}, set(), 10)[0] == []  # broker 1 is not live


def test_request_names_partitions_topics_or_all() -> None:
    """A topic without partitions means all of them; all_topics means everything; neither is refused."""
    request = apb.ElectLeadersRequest(topic_partitions=[apb.TopicPartitions(topic="a", partitions=[2, 0]),
                                                        apb.TopicPartitions(topic="b")])
    assert requested_partitions(request) == [("a", 2), ("a", 0), ("b", None)]
    assert requested_partitions(apb.ElectLeadersRequest(all_topics=True)) is None
    assert "all_topics" in str(requested_partitions(apb.ElectLeadersRequest()))
    assert "no topic" in str(requested_partitions(apb.ElectLeadersRequest(topic_partitions=[apb.TopicPartitions()])))


class FakeElector:
    """Answers from a script: a list of results, or an exception to raise."""

    def __init__(self, answer: Sequence[ElectionResult] | Exception) -> None:
        self.answer = answer
        self.asked: list[tuple[Requested, float]] = []

    def elect_preferred_leaders(self, partitions: Requested, *, timeout_s: float = 30.0) -> list[ElectionResult]:
        self.asked.append((partitions, timeout_s))
        if isinstance(self.answer, Exception):
            raise self.answer
        return list(self.answer)


def test_outcomes_become_error_codes() -> None:
    """Elected is NONE; already preferred, not available, unknown and failed have their own codes and messages."""
    elector = FakeElector([ElectionResult("t", 0, Outcome.ELECTED, 1),
                           ElectionResult("t", 1, Outcome.ALREADY_PREFERRED, 2),
                           ElectionResult("t", 2, Outcome.NOT_AVAILABLE, 3, "preferred replica 1 is not live"),
                           ElectionResult("u", -1, Outcome.UNKNOWN_PARTITION, NO_LEADER, "u is not a replicated topic"),
                           ElectionResult("t", 3, Outcome.FAILED, 2, "retry")])
    response = elect_leaders(apb.ElectLeadersRequest(all_topics=True, timeout_ms=1500), elector, None)
    assert response.error_code == pb.NONE and elector.asked == [(None, 1.5)]
    assert [(r.partition, r.error_code, r.leader) for r in response.results] == [
        (0, pb.NONE, 1), (1, pb.ELECTION_NOT_NEEDED, 2), (2, pb.PREFERRED_LEADER_NOT_AVAILABLE, 3),
        (-1, pb.UNKNOWN_TOPIC_OR_PARTITION, NO_LEADER), (3, pb.UNKNOWN, 2)]
    assert response.results[2].error_message == "preferred replica 1 is not live"


@pytest.mark.parametrize("raised, code", [(NotController("no", 3), pb.NOT_CONTROLLER),
                                          (TimeoutError("slow"), pb.REQUEST_TIMED_OUT)])
def test_refusals_are_request_errors(raised: Exception, code: int) -> None:
    """A broker that is not the controller names it (its id, without a registry); a timeout is REQUEST_TIMED_OUT."""
    response = elect_leaders(apb.ElectLeadersRequest(all_topics=True), FakeElector(raised), None)
    assert response.error_code == code and not response.results
    if code == pb.NOT_CONTROLLER:
        assert response.controller.broker_id == 3


def test_a_broker_outside_a_cluster_knows_no_replicated_partition() -> None:
    """Without ZooKeeper every partition named is unknown, and 'all' is none."""
    request = apb.ElectLeadersRequest(topic_partitions=[apb.TopicPartitions(topic="t", partitions=[1]),
                                                        apb.TopicPartitions(topic="s")])
    response = elect_leaders(request, None, None)
    assert [(r.topic, r.partition, r.error_code) for r in response.results] == [
        ("s", -1, pb.UNKNOWN_TOPIC_OR_PARTITION), ("t", 1, pb.UNKNOWN_TOPIC_OR_PARTITION)]
    assert not elect_leaders(apb.ElectLeadersRequest(all_topics=True), None, None).results


def test_rebalance_settings_are_checked() -> None:
    """Kafka's defaults; a non-positive interval or a percentage outside 0..100 is refused at start-up."""
    config = BrokerConfig.load()
    assert (config["auto.leader.rebalance.enable"], config["leader.imbalance.check.interval.seconds"],
            config["leader.imbalance.per.broker.percentage"]) == (True, 300.0, 10)
    with pytest.raises(ConfigError, match="leader.imbalance"):
        BrokerConfig.load(None, {"leader.imbalance.check.interval.seconds": 0})
    with pytest.raises(ConfigError, match="leader.imbalance"):
        BrokerConfig.load(None, {"leader.imbalance.per.broker.percentage": 101})
