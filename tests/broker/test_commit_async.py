"""Consumer.commit_async(): commits that do not block; callbacks run in a later poll(), commit() or close()."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from rill.broker.testing import RunningBroker
from rill.client.consumer import CommitFailed, Consumer, IllegalStateError, TopicPartition
from rill.client.protocol.messages import Message
from rill.client.simple import SimpleConsumer, SimpleProducer
from tests.broker.group_consumers import consumer_factory, short_session_broker

Outcome = tuple[dict[TopicPartition, int], "BaseException | None"]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with short_session_broker(tmp_path, partitions=1) as b:
        yield b


@pytest.fixture
def consumers(broker: RunningBroker) -> Iterator[Callable[..., Consumer]]:
    yield from consumer_factory(broker, enable_auto_commit=False)


@pytest.fixture
def ends(broker: RunningBroker) -> list[int]:
    """Topic "t" with one partition of five messages; the offset after each."""
    with SimpleConsumer(broker.host, broker.port, timeout=10) as client:
        client.create_topic("t", 1)
    with SimpleProducer(broker.host, broker.port, timeout=10) as producer:
        return [producer.send("t", [f"m{i}".encode()], 0).next_offset for i in range(5)]


def read_all(consumer: Consumer, count: int = 5) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + 10
    while len(got) < count:
        assert time.monotonic() < deadline
        got += consumer.poll(0.05)
    return got


def poll_until(consumer: Consumer, done: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        consumer.poll(0.05)


def test_the_callback_runs_in_a_later_poll_with_the_offsets(consumers, ends) -> None:
    """commit_async() returns before the coordinator answers; a later poll() runs callback(offsets, None), on
    the consumer's thread, and the offsets are committed."""
    c = consumers()
    c.add_topic("t")
    read_all(c)
    outcomes: list[Outcome] = []
    c.commit_async(callback=lambda offsets, error: outcomes.append((offsets, error)))
    assert outcomes == []  # not inside commit_async()
    poll_until(c, lambda: bool(outcomes))
    assert outcomes == [({TopicPartition("t", 0): ends[-1]}, None)]
    assert c.committed(("t", 0)) == ends[-1]
    assert c.metrics()["commits_pending"] == 0


def test_commits_complete_in_the_order_they_were_made(consumers, ends) -> None:
    """Several commit_async() calls: callbacks in call order, and the last offset is what stays committed."""
    c = consumers()
    c.add_topic("t")
    read_all(c)
    order: list[int] = []
    for end in ends:
        c.commit_async({("t", 0): end}, lambda offsets, error: order.append(offsets[TopicPartition("t", 0)]))
    poll_until(c, lambda: len(order) == len(ends))
    assert order == ends
    assert c.committed(("t", 0)) == ends[-1]


def test_a_refused_commit_reaches_the_callback_as_commit_failed(consumers, ends) -> None:
    """A commit the coordinator refuses (a partition this member does not own) gives CommitFailed to the
    callback, not to poll()."""
    c = consumers()
    c.add_topic("t")
    read_all(c)
    outcomes: list[Outcome] = []
    c.commit_async({("t", 0): ends[0], ("other", 0): 0}, lambda offsets, error: outcomes.append((offsets, error)))
    poll_until(c, lambda: bool(outcomes))
    error = outcomes[0][1]
    assert isinstance(error, CommitFailed) and error.code_name != "NONE"
    assert c.committed(("t", 0)) is None


def test_commit_answers_earlier_async_commits_first(consumers, ends) -> None:
    """commit() waits for the commit_async() calls made before it: their callbacks run inside it, and its
    own offset is the one that stays."""
    c = consumers()
    c.add_topic("t")
    read_all(c)
    outcomes: list[Outcome] = []
    c.commit_async({("t", 0): ends[1]}, lambda offsets, error: outcomes.append((offsets, error)))
    c.commit(offsets={("t", 0): ends[3]})
    assert outcomes == [({TopicPartition("t", 0): ends[1]}, None)]
    assert c.committed(("t", 0)) == ends[3]


def test_close_waits_for_pending_commits(consumers, ends) -> None:
    """close() right after commit_async(): the commit is stored and its callback ran inside close()."""
    c = consumers()
    c.add_topic("t")
    read_all(c)
    outcomes: list[Outcome] = []
    c.commit_async(callback=lambda offsets, error: outcomes.append((offsets, error)))
    c.close()
    assert outcomes == [({TopicPartition("t", 0): ends[-1]}, None)]
    later = consumers()
    later.assign([("t", 0)])
    assert later.committed(("t", 0)) == ends[-1]


def test_a_commit_made_during_a_rebalance_fails_in_its_callback(consumers, ends) -> None:
    """commit_async() before the consumer joined (no generation yet): the callback gets CommitFailed
    REBALANCE_IN_PROGRESS, as commit() would raise."""
    c = consumers()
    c.add_topic("t")
    outcomes: list[Outcome] = []
    c.commit_async({("t", 0): 0}, lambda offsets, error: outcomes.append((offsets, error)))
    poll_until(c, lambda: bool(outcomes))
    error = outcomes[0][1]
    assert isinstance(error, CommitFailed) and error.code_name == "REBALANCE_IN_PROGRESS"


def test_a_manual_assignment_commits_asynchronously_too(consumers, ends) -> None:
    """assign() with group.id: commit_async() makes a standalone commit."""
    c = consumers()
    c.assign([("t", 0)])
    read_all(c)
    outcomes: list[Outcome] = []
    c.commit_async(callback=lambda offsets, error: outcomes.append((offsets, error)))
    poll_until(c, lambda: bool(outcomes))
    assert outcomes == [({TopicPartition("t", 0): ends[-1]}, None)]


def test_a_failing_callback_is_logged_and_the_others_still_run(consumers, ends) -> None:
    """A callback that raises is logged (consumer.commit_callback_failed); poll() does not raise it."""
    c = consumers()
    c.add_topic("t")
    read_all(c)
    outcomes: list[Outcome] = []

    def boom(offsets: dict[TopicPartition, int], error: BaseException | None) -> None:
        raise RuntimeError("boom")

    with capture_logs() as logs:
        c.commit_async({("t", 0): ends[0]}, boom)
        c.commit_async({("t", 0): ends[1]}, lambda offsets, error: outcomes.append((offsets, error)))
        poll_until(c, lambda: bool(outcomes))
    assert "consumer.commit_callback_failed" in [e["event"] for e in logs]
    assert outcomes[0][1] is None


def test_commit_async_needs_a_group(broker, ends) -> None:
    """Without group.id commit_async() raises IllegalStateError at once."""
    with Consumer(bootstrap_servers=broker.address) as c:
        c.assign([("t", 0)])
        with pytest.raises(IllegalStateError):
            c.commit_async()
