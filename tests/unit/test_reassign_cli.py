"""``rill topics reassign`` without a cluster: Kafka's plan files, the proposal, and --verify's verdicts."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from rill.client.cli import topics_reassign
from rill.client.cli.main import main
from rill.client.cli.reassign_plan import PlanError, parse_plan, parse_topics, plan_json, propose
from rill.v1 import admin_pb2 as apb


def test_plan_round_trips_in_kafkas_format() -> None:
    text = '{"version":1,"partitions":[{"topic":"t","partition":1,"replicas":[4,2,3],"log_dirs":["any","any","any"]},' \
           '{"topic":"t","partition":0,"replicas":[2,3,4]}]}'
    moves = parse_plan(text)
    assert moves == [("t", 1, (4, 2, 3)), ("t", 0, (2, 3, 4))]
    assert plan_json(moves) == ('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3,4]},'
                                '{"topic":"t","partition":1,"replicas":[4,2,3]}]}')
    assert parse_topics('{"version":1,"topics":[{"topic":"a"},{"topic":"b"},{"topic":"a"}]}') == ["a", "b"]


@pytest.mark.parametrize(("text", "message"), [
    ("nope", "not valid JSON"),
    ('{"version":2,"partitions":[]}', "version 2"),
    ('{"version":1,"partitions":[]}', "non-empty"),
    ('{"partitions":[{"topic":"t","partition":-1,"replicas":[1]}]}', "non-negative"),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":[1,1]}]}', "twice"),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":[1]},{"topic":"t","partition":0,"replicas":[2]}]}',
     "listed twice"),
    ('{"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["/data"]}]}', "log_dirs"),
])
def test_bad_plans_are_refused_with_a_reason(text: str, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        parse_plan(text)


def test_proposal_spreads_every_partition_over_the_brokers_given() -> None:
    """Every partition gets the topic's factor of distinct brokers from the list, leaders spread round-robin."""
    current = {"t": [(1, 2, 3)] * 6, "u": [(1, 2)] * 2}
    moves = propose(current, [4, 2, 3], random.Random(3))
    assert [(t, p) for t, p, _ in moves] == [("t", p) for p in range(6)] + [("u", 0), ("u", 1)]
    assert all(set(r) <= {2, 3, 4} and len(set(r)) == len(r) for _, _, r in moves)
    assert [len(r) for _, _, r in moves] == [3] * 6 + [2, 2]
    assert sorted(r[0] for t, _, r in moves if t == "t") == [2, 2, 3, 3, 4, 4]
    with pytest.raises(PlanError, match="needs at least that many brokers"):
        propose(current, [1, 2])


class FakeAdmin:
    """The AdminClient calls --verify makes, answered from fixed values."""

    def __init__(self, replicas: list[tuple[int, ...]], moving: list[int], throttle: int) -> None:
        self.replicas, self.moving, self.throttle = replicas, moving, throttle
        self.throttle_set: list[int] = []

    def __enter__(self) -> FakeAdmin:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def describe_topics(self, topics: Any = ()) -> apb.DescribeTopicsResponse:
        return apb.DescribeTopicsResponse(topics=[apb.TopicDescription(topic="t", partitions=[
            apb.PartitionDescription(partition=p, replicas=r) for p, r in enumerate(self.replicas)])])

    def list_partition_reassignments(self, topics: Any = ()) -> apb.ListPartitionReassignmentsResponse:
        return apb.ListPartitionReassignmentsResponse(throttle_bytes_per_second=self.throttle, reassignments=[
            apb.OngoingReassignment(topic="t", partition=p) for p in self.moving])

    def alter_replication_throttle(self, rate: int) -> apb.AlterReplicationThrottleResponse:
        self.throttle_set.append(rate)
        return apb.AlterReplicationThrottleResponse(previous=self.throttle)


def run_verify(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake: FakeAdmin) -> int:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 3, 4]},
                                                             {"topic": "t", "partition": 1, "replicas": [3, 4, 2]}]}))
    monkeypatch.setattr(topics_reassign, "AdminClient", lambda *a, **k: fake)
    return main(["topics", "reassign", "--grpc", "x:1", "--verify", "--reassignment-json-file", str(plan)])


def test_verify_says_in_progress_then_complete_and_removes_the_throttle(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """While a move is listed, exit 3 and the throttle stays; once all are done, exit 0 and the throttle goes."""
    moving = FakeAdmin([(2, 3, 4), (3, 4, 2, 1)], [1], 500_000)
    assert run_verify(monkeypatch, tmp_path, moving) == topics_reassign.EXIT_IN_PROGRESS
    assert capsys.readouterr().out == ("Status of partition reassignment:\n"
                                       "Reassignment of partition t-0 is completed.\n"
                                       "Reassignment of partition t-1 is still in progress.\n")
    assert moving.throttle_set == []
    done = FakeAdmin([(2, 3, 4), (3, 4, 2)], [], 500_000)
    assert run_verify(monkeypatch, tmp_path, done) == 0
    assert capsys.readouterr().out.endswith("Reassignment of partition t-1 is completed.\n"
                                            "Clearing the replication throttle (was 500000 B/s)\n")
    assert done.throttle_set == [0]


def test_verify_fails_for_a_partition_neither_moved_nor_moving(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeAdmin([(2, 3, 4), (1, 2, 3)], [], 0)
    assert run_verify(monkeypatch, tmp_path, fake) == 1
    captured = capsys.readouterr()
    assert "There is no active reassignment of partition t-1, but replica set is [1, 2, 3] rather than [3, 4, 2]." \
        in captured.out
    assert "not where the plan puts them" in captured.err
