"""Four things a Kafka user trips over in the rill CLI, each against a real in-process broker."""

from __future__ import annotations

import io
import sys
import time
from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from rill.broker.testing import RunningBroker
from rill.client.cli.main import main
from rill.client.consumer import Consumer
from rill.client.grpc_client import AdminClient
from rill.client.simple import SimpleConsumer, SimpleProducer


@pytest.fixture(autouse=True)
def quiet_broker() -> Iterator[None]:
    """The in-process broker's log events are captured, so stdout and stderr are the CLI's."""
    with capture_logs():
        yield


def test_by_duration_as_documented_parses(broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """``--by-duration -1h`` (docs/groups.md) is a duration, not an unknown option: the plan is printed."""
    with SimpleProducer(broker.host, broker.port) as producer:
        producer.send("events", [b"a"], partition=0)
    with AdminClient(broker.grpc_address) as admin:
        admin.create_group("app", ["events"])
    assert main(["groups", "rewind", "app", "--topic", "events", "--by-duration", "-1h",
                 "--bootstrap-server", broker.address]) == 0
    assert "events" in capsys.readouterr().out


def test_group_listing_shows_a_consumer_created_groups_topics(broker: RunningBroker,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A group a Consumer created (and left) lists the topic it consumed and committed."""
    with SimpleProducer(broker.host, broker.port) as producer:
        producer.send("clicks", [b"a", b"b"], partition=0)
    consumer = Consumer(bootstrap_servers=broker.address, group_id="clickers", enable_auto_commit=False,
                        session_timeout_ms=6000, heartbeat_interval_ms=500)
    consumer.subscribe(["clicks"])
    got = 0
    deadline = time.monotonic() + 20
    while got < 2 and time.monotonic() < deadline:
        got += len(consumer.poll(0.2))
    consumer.commit()
    consumer.close()
    assert got == 2
    assert main(["groups", "list", "--bootstrap-server", broker.address]) == 0
    rows = {line.split("\t")[0]: line.split("\t") for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows["clickers"][4] == "clicks"


def test_small_inputs_are_spread_from_a_random_partition(broker: RunningBroker, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Twelve one-line produces to a four-partition topic do not all land in partition 0."""
    with SimpleConsumer(broker.host, broker.port) as client:
        client.create_topic("lines", 4)
    for i in range(12):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"line %d\n" % i)))
        assert main(["produce", "--topic", "lines", "--bootstrap-server", broker.address]) == 0
    capsys.readouterr()
    with SimpleConsumer(broker.host, broker.port) as client:
        used = {p for p in range(4) if client.latest_offset("lines", p) > 0}
    assert len(used) > 1, used


def test_create_of_an_existing_topic_fails_unless_if_not_exists(broker: RunningBroker,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A second create of a topic says it exists and exits 1; with --if-not-exists it exits 0."""
    argv = ["topics", "create", "--topic", "orders", "--partitions", "2", "--bootstrap-server", broker.address]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(argv) == 1
    assert "already exists" in capsys.readouterr().err
    assert main([*argv, "--if-not-exists"]) == 0
