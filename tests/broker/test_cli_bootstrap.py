"""One ``--bootstrap-server`` (the data port) for every ``rill`` command: the gRPC port comes from METADATA,
and a gRPC port given by mistake (or a data port given as ``--grpc``) is named as such."""

from __future__ import annotations

import io
import socket
import sys
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


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return int(s.getsockname()[1])


@pytest.fixture
def seeded(broker: RunningBroker) -> RunningBroker:
    with SimpleProducer(broker.host, broker.port) as producer:
        producer.send("events", [b"a"], partition=0)
    with AdminClient(broker.grpc_address) as admin:
        admin.create_group("app", ["events"])
    return broker


@pytest.mark.parametrize("argv", [
    ["topics", "list"], ["topics", "describe"], ["groups", "list"], ["groups", "describe", "app"],
    ["groups", "describe", "app", "--state"], ["groups", "rewind", "app", "--topic", "events", "--to-earliest"],
    ["topics", "elect-leaders", "--all-topics"], ["consume", "--topic", "events", "-q"],
    ["topics", "alter", "--topic", "events", "--config", "min.insync.replicas=2"]])
def test_every_command_takes_the_data_port(seeded: RunningBroker, argv: list[str],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Each command reaches the broker through --bootstrap-server HOST:DATA_PORT (alter is refused by the
    broker, for a 0.7-style topic: the Admin service was reached)."""
    code = main([*argv, "--bootstrap-server", seeded.address])
    err = capsys.readouterr().err
    assert code == (1 if argv[1] == "alter" else 0), err
    if argv[1] == "alter":
        assert "UNKNOWN_TOPIC_OR_PARTITION" in err


@pytest.mark.parametrize("argv", [["topics", "list"], ["groups", "list"], ["consume", "--topic", "events"],
                                  ["topics", "describe"], ["produce", "--topic", "events"]])
def test_a_grpc_port_given_as_bootstrap_server_is_named(seeded: RunningBroker, argv: list[str],
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The gRPC port as --bootstrap-server fails with a line that says so and gives the data port."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"x\n")))
    assert main([*argv, "--bootstrap-server", seeded.grpc_address, "--timeout", "5"]) == 1
    err = capsys.readouterr().err
    assert (f"{seeded.grpc_address} is a broker's gRPC port, not its data port: give --bootstrap-server "
            f"{seeded.address}") in err
    assert "Traceback" not in err


def test_a_data_port_given_as_grpc_is_named(seeded: RunningBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """--grpc with the data port says it is the data port, and which gRPC port to give."""
    assert main(["groups", "list", "--grpc", seeded.address, "--timeout", "5"]) == 1
    err = capsys.readouterr().err
    assert (f"{seeded.address} is a broker's data port, not its gRPC port: give --grpc {seeded.grpc_address}, "
            f"or --bootstrap-server {seeded.address}") in err


def test_a_list_of_bootstrap_servers_skips_one_that_is_down(seeded: RunningBroker,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """With a comma-separated list the first broker that answers is used, for data and gRPC commands alike."""
    servers = f"127.0.0.1:{free_port()},{seeded.address}"
    assert main(["groups", "list", "--bootstrap-server", servers]) == 0
    assert "app\t" in capsys.readouterr().out
    assert main(["consume", "--topic", "events", "-q", "--bootstrap-server", servers]) == 0
    assert capsys.readouterr().out == "a\n"
    assert main(["topics", "list", "--bootstrap-server", servers]) == 0
    assert capsys.readouterr().out == "events\t2\n"
