"""``rill consume --group G`` (kcat -G): a member of the group, committing each batch it writes, against an
in-process broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from rill.broker.testing import RunningBroker
from rill.client.cli.main import main
from rill.client.grpc_client import AdminClient
from rill.client.simple import SimpleProducer


@pytest.fixture(autouse=True)
def quiet_broker() -> Iterator[None]:
    with capture_logs():
        yield


def produce(broker: RunningBroker, tag: str, count: int) -> list[bytes]:
    payloads = [f"{tag}-{i}".encode() for i in range(count)]
    with SimpleProducer(broker.host, broker.port) as producer:
        producer.send("events", payloads[::2], partition=0)
        producer.send("events", payloads[1::2], partition=1)
    return payloads


def consume(broker: RunningBroker, *argv: str) -> int:
    return main(["consume", "--topic", "events", "--group", "app", "-q", "--poll-ms", "200", *argv,
                 "--bootstrap-server", broker.address])


def committed(broker: RunningBroker) -> dict[int, int]:
    with AdminClient(broker.grpc_address) as admin:
        return {o.partition: o.offset for o in admin.fetch_offsets("app").offsets}


def test_a_group_member_reads_on_from_its_commits(broker: RunningBroker,
                                                  capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    """The first run reads everything and commits the ends; the next run reads only what came since."""
    first = produce(broker, "a", 6)
    assert consume(broker) == 0
    assert sorted(capsysbinary.readouterr().out.splitlines()) == sorted(first)
    with AdminClient(broker.grpc_address) as admin:
        ends = {p.partition: p.end_offset for p in admin.describe_topics(["events"]).topics[0].partitions}
    assert committed(broker) == ends
    second = produce(broker, "b", 4)
    assert consume(broker) == 0
    assert sorted(capsysbinary.readouterr().out.splitlines()) == sorted(second)
    assert main(["groups", "describe", "app", "--bootstrap-server", broker.address]) == 0
    assert "Group app: Empty" in capsysbinary.readouterr().out.decode()  # it left the group on exit


def test_max_messages_commits_only_what_was_written(broker: RunningBroker,
                                                    capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    """Stopped by --max-messages, a run commits what it printed: the next run prints the rest, once each."""
    sent = produce(broker, "m", 10)
    assert consume(broker, "--max-messages", "3") == 0
    head = capsysbinary.readouterr().out.splitlines()
    assert len(head) == 3
    assert consume(broker) == 0
    rest = capsysbinary.readouterr().out.splitlines()
    assert sorted(head + rest) == sorted(sent)


def test_latest_without_a_commit_starts_at_the_end(broker: RunningBroker,
                                                   capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    """--offset latest is where a partition without a committed offset starts (auto.offset.reset)."""
    produce(broker, "old", 4)
    assert consume(broker, "--offset", "latest") == 0
    assert capsysbinary.readouterr().out == b""


def test_an_unknown_topic_is_an_error(broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """As without --group, a topic that does not exist is named."""
    assert main(["consume", "--topic", "ghost", "--group", "app", "--bootstrap-server", broker.address]) == 1
    assert "topic 'ghost' does not exist" in capsys.readouterr().err
