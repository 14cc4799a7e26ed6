"""LeaderReads (rill.client.spark.leaders) against one in-process broker: which errors it waits out, which not."""

from __future__ import annotations

import socket
import time

import pytest

from rill.broker.testing import RunningBroker
from rill.client.errors import ConnectionClosed, OffsetOutOfRange
from rill.client.simple import SimpleConsumer, SimpleProducer
from rill.client.spark.leaders import Leader, LeaderReads
from rill.client.structs import TopicPartition


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_reads_go_to_the_leader_metadata_names(broker: RunningBroker) -> None:
    """With an unreachable first bootstrap address, METADATA comes from the next one and reads from the leader."""
    with SimpleConsumer(broker.host, broker.port) as c:
        c.create_topic("t", 1)
    with SimpleProducer(broker.host, broker.port) as p:
        p.send("t", [b"one", b"two"], 0)
    with LeaderReads([("127.0.0.1", free_port()), (broker.host, broker.port)], wait_s=5) as reads:
        assert [t.topic for t in reads.metadata(["t"]).topics] == ["t"]
        assert reads.leader(TopicPartition("t", 0)) == Leader(broker.host, broker.port, 0)
        assert [m.value for m in reads.fetch("t", 0, 0)] == [b"one", b"two"]
        assert reads.bounds(TopicPartition("t", 0)) == (0, 26)


def test_a_non_retriable_error_is_raised_at_once(broker: RunningBroker) -> None:
    """OffsetOutOfRange is the answer, not a sign that the leader moved: no waiting."""
    with SimpleConsumer(broker.host, broker.port) as c:
        c.create_topic("t", 1)
    with LeaderReads([(broker.host, broker.port)], wait_s=30) as reads:
        reads.metadata(["t"])
        began = time.monotonic()
        with pytest.raises(OffsetOutOfRange):
            reads.fetch("t", 0, 1000)
        assert time.monotonic() - began < 2


def test_an_unreachable_leader_is_waited_for_then_reported() -> None:
    """A leader that cannot be reached (and no broker to ask where it went) fails after wait_s."""
    address = ("127.0.0.1", free_port())
    with LeaderReads([address], wait_s=0.5, timeout=1) as reads:
        reads.assume(TopicPartition("t", 0), Leader(*address, 0))
        began = time.monotonic()
        with pytest.raises(ConnectionClosed):
            reads.fetch("t", 0, 0)
        assert 0.4 < time.monotonic() - began < 5
