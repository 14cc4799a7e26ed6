"""The coordinator client with a fake coordinator: joins, heartbeats, rebalances, evictions, commits."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from structlog.testing import capture_logs

from rill.client.clock import FakeClock
from rill.client.consumer.errors import CommitFailed, GroupCoordinatorError, MemberEvicted
from rill.client.consumer.fetcher import FetchConfig, Fetcher
from rill.client.consumer.group_client import GroupClient
from rill.client.consumer.membership import REGISTERING, STABLE, UNJOINED
from rill.client.net.selector_loop import SelectorLoop
from rill.client.consumer.settings import consumer_settings
from rill.client.consumer.subscription import SubscriptionState, TopicPartition
from rill.v1 import coordinator_pb2 as pb

from tests.unit.consumer.conftest import FakeCoordinator, FakeFuture, FakeMetadata, joined

A, B = TopicPartition("t", 0), TopicPartition("t", 1)


class Rig:
    def __init__(self, **settings: object) -> None:
        s = consumer_settings({"group.id": "g", "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
                               "auto.commit.interval.ms": 5000, **settings}, {})
        self.clock = FakeClock(1000.0)
        self.sub = SubscriptionState("earliest")
        self.sub.topics.add("t")
        self.network = SelectorLoop()
        fetcher = Fetcher(self.sub, FakeMetadata(), self.network,  # type: ignore[arg-type]
                          FetchConfig(1000, 1000, 100, 1, 5.0, 0.1), self.clock)
        self.revoked: list[list[TopicPartition]] = []
        self.assigned: list[list[TopicPartition]] = []
        self.group = GroupClient("g", s, self.sub, fetcher, FakeMetadata(), self.network,  # type: ignore[arg-type]
                                 self.clock, self.assigned.append, self.revoked.append)
        self.coordinator = FakeCoordinator()
        self.group.coordinator_lookup._admins["127.0.0.1:2"] = self.coordinator  # type: ignore[assignment]

    def join(self, member: str = "m-1", generation: int = 1, partitions: dict | None = None) -> None:
        future = FakeFuture()
        self.coordinator.register_futures.append(future)
        self.group.tick(self.clock())
        assert self.group.state == REGISTERING
        future.complete(joined(member, generation, partitions if partitions is not None else {("t", 0): 10}))
        self.group.tick(self.clock())
        assert self.group.state == STABLE


@pytest.fixture
def rig() -> Iterator[Rig]:
    r = Rig()
    yield r
    r.network.close()


def test_join_owns_the_partitions_from_their_offsets(rig: Rig) -> None:
    """The register answer sets member id, generation, assignment and positions; on_assign is called."""
    rig.join(partitions={("t", 0): 10, ("t", 1): -1})
    assert (rig.group.member_id, rig.group.generation) == ("m-1", 1)
    assert rig.sub.positions() == {A: 10} and rig.sub.needs_reset() == [B]
    assert rig.assigned == [[A, B]]
    assert rig.coordinator.registers[0] == {"consumer_id": "", "topics": ["t"], "static": []}


def test_nothing_registers_without_a_subscription() -> None:
    """A consumer with no topics and no static partitions stays out of the group."""
    r = Rig()
    r.sub.topics.clear()
    r.group.tick(r.clock())
    assert r.group.state == UNJOINED and r.coordinator.registers == []
    r.network.close()


def test_heartbeats_go_out_every_interval_with_the_generation(rig: Rig) -> None:
    """Heartbeats are sent when due, carrying member id and generation."""
    rig.join()
    rig.group.tick(rig.clock())
    assert rig.coordinator.heartbeats == []
    rig.clock.advance(1.0)
    rig.group.tick(rig.clock())
    assert rig.coordinator.heartbeats == [{"consumer_id": "m-1", "generation": 1}]


def test_a_heartbeat_error_stops_fetching_commits_and_reregisters(rig: Rig) -> None:
    """REBALANCE_IN_PROGRESS: auto-commit the positions, on_revoke, give up the partitions, re-register."""
    rig.join()
    rig.sub.advance(A, 50)
    rig.coordinator.heartbeat_answer = pb.REBALANCE_IN_PROGRESS
    rig.clock.advance(1.0)
    rig.group.tick(rig.clock())  # sends the heartbeat (answered at once by the fake)
    rig.group.tick(rig.clock())  # reads the answer: rejoin
    assert rig.coordinator.commits[-1]["offsets"] == [("t", 0, 50)]
    assert rig.revoked == [[A]] and rig.sub.assignment == {}
    assert rig.group.state == REGISTERING
    assert rig.coordinator.registers[-1]["consumer_id"] == "m-1"


def test_unknown_member_is_an_eviction_raised_once(rig: Rig) -> None:
    """UNKNOWN_MEMBER from a heartbeat: MemberEvicted names group and generation, once; then a fresh join."""
    rig.join()
    rig.sub.advance(A, 50)
    rig.coordinator.heartbeat_answer = pb.UNKNOWN_MEMBER
    rig.clock.advance(1.0)
    rig.group.tick(rig.clock())
    with capture_logs() as logs, pytest.raises(MemberEvicted) as evicted:
        rig.group.tick(rig.clock())
    assert (evicted.value.group, evicted.value.generation, evicted.value.partitions) == ("g", 1, [A])
    assert evicted.value.code_name == "UNKNOWN_MEMBER"
    assert "consumer.evicted" in [e["event"] for e in logs]
    assert rig.coordinator.commits == [] and rig.revoked == []  # nothing committed for lost partitions
    assert rig.coordinator.registers[-1]["consumer_id"] == ""
    rig.group.tick(rig.clock())  # not raised again


def test_no_answer_for_a_session_timeout_is_an_eviction(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a successful heartbeat for the whole session timeout (the coordinator's: 10 s) the member is
    surely evicted."""
    rig.join()
    monkeypatch.setattr(rig.coordinator, "heartbeat_future", lambda *a, **k: FakeFuture())  # never answered
    rig.clock.advance(9.9)
    rig.group.tick(rig.clock())
    rig.clock.advance(0.2)
    with pytest.raises(MemberEvicted, match="not called often enough"):
        rig.group.tick(rig.clock())


def test_a_failed_heartbeat_call_finds_the_coordinator_again(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A heartbeat whose call fails (coordinator unreachable) is logged; the member keeps its partitions."""
    rig.join()
    failing = FakeFuture(error=grpc.RpcError("unavailable"))
    monkeypatch.setattr(rig.coordinator, "heartbeat_future", lambda *a, **k: failing)
    rig.clock.advance(1.0)
    rig.group.tick(rig.clock())
    with capture_logs() as logs:
        rig.group.tick(rig.clock())
    assert "consumer.heartbeat_failed" in [e["event"] for e in logs]
    assert rig.group.state == STABLE and rig.group.coordinator is None and rig.sub.assignment


def test_register_errors(rig: Rig) -> None:
    """UNKNOWN_MEMBER: register again with no id at once; a user error is raised and retried later."""
    rig.coordinator.register_futures.append(FakeFuture(pb.RegisterConsumerResponse(error_code=pb.UNKNOWN_MEMBER)))
    rig.group.member_id = "stale"
    rig.group.tick(rig.clock())
    rig.group.tick(rig.clock())
    assert [r["consumer_id"] for r in rig.coordinator.registers] == ["stale", ""]
    rig.coordinator.registers.clear()
    rig.group.state, rig.group._register = UNJOINED, None
    rig.coordinator.register_futures.append(
        FakeFuture(pb.RegisterConsumerResponse(error_code=pb.PARTITION_ALREADY_CLAIMED)))
    rig.group._retry_at = 0
    rig.group.tick(rig.clock())
    with pytest.raises(GroupCoordinatorError, match="PARTITION_ALREADY_CLAIMED"):
        rig.group.tick(rig.clock())
    rig.group.tick(rig.clock())
    assert len(rig.coordinator.registers) == 1  # the retry waits a second


def test_auto_commit_commits_only_moved_positions_on_its_interval(rig: Rig) -> None:
    """Auto-commit runs every interval and sends only positions that moved since the last commit."""
    rig.join()
    rig.clock.advance(5.0)
    rig.group.tick(rig.clock())
    assert rig.coordinator.commits == []
    rig.sub.advance(A, 70)
    rig.clock.advance(5.0)
    rig.group.tick(rig.clock())
    assert rig.coordinator.commits == [{"offsets": [("t", 0, 70)], "consumer_id": "m-1", "generation": 1}]


def test_a_refused_commit_raises_commit_failed_and_rejoins(rig: Rig) -> None:
    """ILLEGAL_GENERATION: CommitFailed naming the partitions and the code; the member re-registers."""
    rig.join()
    rig.coordinator.commit_answer = pb.ILLEGAL_GENERATION
    with pytest.raises(CommitFailed) as failed:
        rig.group.commit({A: 10})
    assert failed.value.partitions == {A: "ILLEGAL_GENERATION"} and failed.value.generation == 1
    rig.group.tick(rig.clock())
    assert rig.group.state == REGISTERING


def test_rewinding_own_partitions_reregisters_without_committing(rig: Rig) -> None:
    """After RewindConsumer for a partition it owns, the member re-registers and does not commit first."""
    rig.join()
    rig.sub.advance(A, 90)
    moved = rig.group.rewind([("t", 0, 0)])
    assert moved == {A: 0}
    rig.group.tick(rig.clock())
    assert rig.coordinator.commits == []
    assert rig.group.state == REGISTERING and rig.coordinator.registers[-1]["consumer_id"] == "m-1"


def test_leave_sends_leave_group(rig: Rig) -> None:
    """leave() tells the coordinator, so the others rebalance at once."""
    rig.join()
    rig.group.leave()
    assert rig.coordinator.left == ["m-1"] and rig.group.state == UNJOINED


def test_no_broker_naming_the_coordinator_yet_is_retried_not_raised(rig: Rig) -> None:
    """ListGroups answering NOT_COORDINATOR (a coordinator being replaced) makes poll() retry after the backoff,
    never raise: the consumer registers once a broker names the coordinator."""
    rig.coordinator.list_answers.extend([pb.NOT_COORDINATOR, pb.NOT_COORDINATOR])
    rig.group.tick(rig.clock())  # must not raise
    assert rig.group.state == UNJOINED and not rig.coordinator.registers
    for _ in range(2):
        rig.clock.advance(1.0)
        rig.group.tick(rig.clock())
    assert len(rig.coordinator.registers) == 1
