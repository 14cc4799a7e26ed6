"""``rill groups describe --members|--state`` and ``rill groups create`` against an in-process broker."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from rill.broker.testing import RunningBroker
from rill.client.cli.groups_describe import MEMBERS_HEADER, STATE_HEADER
from rill.client.cli.main import main
from rill.client.consumer import Consumer
from rill.client.simple import SimpleProducer


@pytest.fixture
def member(broker: RunningBroker) -> Iterator[Consumer]:
    """A live member of group app that owns both partitions of events."""
    with SimpleProducer(broker.host, broker.port) as producer:
        producer.send("events", [b"a"], partition=0)
    with capture_logs():
        consumer = Consumer(bootstrap_servers=broker.address, group_id="app", client_id="billing",
                            session_timeout_ms=6000, heartbeat_interval_ms=500)
        consumer.subscribe(["events"])
        deadline = time.monotonic() + 20
        while len(consumer.assignment()) < 2 and time.monotonic() < deadline:
            consumer.poll(0.1)
        assert len(consumer.assignment()) == 2
        yield consumer
        consumer.close()


def describe(broker: RunningBroker, *argv: str) -> int:
    return main(["groups", "describe", "app", *argv, "--bootstrap-server", broker.address])


def test_members_lists_each_consumer_and_its_assignment(broker: RunningBroker, member: Consumer,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """--members: CONSUMER-ID, HOST (not recorded: -), CLIENT-ID, #PARTITIONS and ASSIGNMENT, as Kafka's."""
    assert describe(broker, "--members") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [MEMBERS_HEADER, f"app\t{member.member_id}\t-\tbilling\t2\tevents(0,1)"]


def test_state_names_the_coordinator_by_its_data_port(broker: RunningBroker, member: Consumer,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """--state: COORDINATOR (ID) as host:port (id), the strategy, the state and the member count."""
    assert describe(broker, "--state") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [STATE_HEADER, f"app\t127.0.0.1:{broker.port} (0)\trange\tStable\t1"]
    assert main(["groups", "describe", "app", "--state", "--members"]) == 2  # one view at a time, as Kafka's


def test_members_of_an_empty_group(broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """A group without members prints the header, and says so on stderr."""
    assert main(["groups", "create", "app", "--topic", "events", "--bootstrap-server", broker.address]) == 0
    capsys.readouterr()
    assert describe(broker, "--members") == 0
    out, err = capsys.readouterr()
    assert out == MEMBERS_HEADER + "\n" and "Consumer group 'app' has no active members." in err


def test_create_a_group_once(broker: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """create makes the group with its settings; again is an error unless --if-not-exists; list shows it."""
    argv = ["groups", "create", "--group", "app", "--topic", "events", "--topic", "audit", "--strategy", "sticky",
            "--session-timeout-ms", "20000", "--bootstrap-server", broker.address]
    assert main(argv) == 0
    assert capsys.readouterr().out == f"Created group app (coordinator broker 0, 127.0.0.1:{broker.port}).\n"
    assert main(argv) == 1
    assert "group 'app' already exists" in capsys.readouterr().err
    assert main([*argv, "--if-not-exists"]) == 0
    assert main(["groups", "list", "--bootstrap-server", broker.address]) == 0
    assert "app\tEmpty\t0\t0\taudit,events\t" in capsys.readouterr().out
    assert describe(broker, "--state") == 0
    assert "\tsticky\tEmpty\t0" in capsys.readouterr().out
    assert main(["groups", "create", "bad/name", "--bootstrap-server", broker.address]) == 1
    assert "INVALID_GROUP_NAME" in capsys.readouterr().err
