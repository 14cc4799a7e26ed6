"""A pattern subscriber is a group member once its pattern was matched, even when it matched nothing
(so the coordinator can tell the topics that appear later are new), unless that would mean the group's topics."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from rill.client.consumer.membership import REGISTERING, UNJOINED
from rill.v1 import coordinator_pb2 as pb

from tests.unit.consumer.test_group import Rig


@pytest.fixture
def rig() -> Iterator[Rig]:
    r = Rig()
    r.sub.topics.clear()
    r.sub.pattern = re.compile(r"fresh-.*")
    yield r
    r.network.close()


def test_a_pattern_not_matched_yet_does_not_register(rig: Rig) -> None:
    """Before the first match there is nothing to say: no RegisterConsumer."""
    rig.group.tick(rig.clock())
    assert rig.group.state == UNJOINED and rig.coordinator.registers == []


def test_a_pattern_that_matched_nothing_registers_with_no_topics(rig: Rig) -> None:
    """Matched against a cluster with no matching topic: the consumer registers, with no topics."""
    assert not rig.sub.set_matched(["orders"])
    rig.group.tick(rig.clock())
    assert rig.group.state == REGISTERING
    assert rig.coordinator.registers == [{"consumer_id": "", "topics": [], "static": []}]


def test_it_waits_for_a_match_when_the_group_lists_topics(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """No topics would mean "the group's topics" to the coordinator: with a group that lists some, the
    consumer waits, and registers once the pattern matches a topic."""
    listing = pb.ListGroupsResponse(groups_info=[pb.GroupInfo(
        group_name="g", topics=["orders"], controller_broker=pb.Broker(host="127.0.0.1", grpc_port=2))])
    monkeypatch.setattr(rig.coordinator, "list_groups", lambda names=(): listing)
    rig.sub.set_matched(["orders"])
    with capture_logs() as logs:
        rig.group.tick(rig.clock())
    assert rig.group.state == UNJOINED and rig.coordinator.registers == []
    assert "consumer.pattern_waiting" in [e["event"] for e in logs]
    assert rig.sub.set_matched(["orders", "fresh-1"])
    rig.group.request_rejoin("the pattern matches other topics")
    rig.group.tick(rig.clock())
    assert rig.coordinator.registers[-1]["topics"] == ["fresh-1"]
