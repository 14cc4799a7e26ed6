"""The grpc.aio server (``grpc.server = "aio"``): the same answers as the sync server, and what differs.

The gRPC tests of test_coordinator_grpc.py run here again against the server that
file does not use: the aio server normally, the sync one when RILL_TEST_GRPC_SERVER=aio
makes aio the default. So every run of the suite covers both.
"""

from __future__ import annotations

import inspect
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import structlog
from structlog.testing import capture_logs

from rill.broker.config import BrokerConfig, ConfigError
from rill.broker.testing import GRPC_SERVER_ENV, RunningBroker, running_broker
from rill.coordinator.aio_server import AioAdminServicer, AioGroupCoordinatorServicer
from rill.v1 import admin_pb2 as apb
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import coordinator_pb2_grpc as pb_grpc

from tests.broker import test_coordinator_grpc as grpc_tests

OTHER_SERVER = "sync" if os.environ.get(GRPC_SERVER_ENV) == "aio" else "aio"
TIMEOUT = 10.0


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with running_broker(tmp_path / "data", num_partitions=2, grpc_server=OTHER_SERVER) as b:
        assert b.broker.coordination.kind == OTHER_SERVER
        yield b


# Every test of test_coordinator_grpc.py, with its fixtures, against the broker above.
channel, stub, admin = grpc_tests.channel, grpc_tests.stub, grpc_tests.admin
globals().update({name: getattr(grpc_tests, name) for name in dir(grpc_tests) if name.startswith("test_")})


@pytest.fixture
def aio_broker(tmp_path: Path) -> Iterator[RunningBroker]:
    with running_broker(tmp_path / "aio", num_partitions=2, grpc_server="aio", grpc_max_workers=1) as b:
        yield b


@pytest.mark.parametrize("servicer, service", [
    (AioGroupCoordinatorServicer, pb.DESCRIPTOR.services_by_name["GroupCoordinator"]),
    (AioAdminServicer, apb.DESCRIPTOR.services_by_name["Admin"]),
])
def test_every_rpc_has_a_coroutine(servicer: type, service) -> None:
    """A new RPC in the .proto must get an async method here too (the generated base's would answer UNIMPLEMENTED)."""
    for method in service.methods:
        assert method.name in vars(servicer), f"{servicer.__name__} lacks {method.name}"
        assert inspect.iscoroutinefunction(getattr(servicer, method.name)), method.name


def test_a_waiting_register_holds_no_thread(aio_broker: RunningBroker) -> None:
    """With one worker thread, a RegisterConsumer waits for its rebalance while the other member
    heartbeats, re-registers and completes it: the wait holds no thread (the sync server would need two)."""
    with grpc.insecure_channel(aio_broker.grpc_address) as ch:
        s = pb_grpc.GroupCoordinatorStub(ch)
        assert grpc_tests.create(s, "one-thread", ["t"]).error_code == pb.NONE
        first = grpc_tests.register(s, "one-thread")
        results: dict[str, pb.RegisterConsumerResponse] = {}
        joiner = threading.Thread(target=lambda: results.setdefault("second", grpc_tests.register(s, "one-thread")))
        joiner.start()
        deadline = time.monotonic() + TIMEOUT
        while s.Heartbeat(pb.HeartbeatRequest(consumer_group="one-thread", consumer_id=first.consumer_id,
                                              generation=first.generation), timeout=TIMEOUT).error_code == pb.NONE:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        again = grpc_tests.register(s, "one-thread", first.consumer_id)
        joiner.join(TIMEOUT)
        assert results["second"].generation == again.generation == first.generation + 1


def test_register_past_its_deadline_is_deadline_exceeded(aio_broker: RunningBroker) -> None:
    """A RegisterConsumer whose rebalance does not complete in time ends with DEADLINE_EXCEEDED."""
    with grpc.insecure_channel(aio_broker.grpc_address) as ch:
        s = pb_grpc.GroupCoordinatorStub(ch)
        grpc_tests.create(s, "slow", ["t"])
        grpc_tests.register(s, "slow")  # this member never heartbeats, so the next join waits for it
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as raised:
            s.RegisterConsumer(pb.RegisterConsumerRequest(consumer_group="slow"), timeout=0.3)
        assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - started < 5
        assert s.ListGroups(pb.ListGroupsRequest(consumer_groups=["slow"]), timeout=TIMEOUT).error_code == pb.NONE


def test_stop_with_a_register_waiting(tmp_path: Path) -> None:
    """Stopping the broker while a RegisterConsumer waits ends that call and the server's thread."""
    errors: list[grpc.RpcError] = []
    with running_broker(tmp_path / "d", grpc_server="aio") as b:
        ch = grpc.insecure_channel(b.grpc_address)
        s = pb_grpc.GroupCoordinatorStub(ch)
        grpc_tests.create(s, "stopping", ["t"])
        grpc_tests.register(s, "stopping")

        def waiting() -> None:
            try:
                s.RegisterConsumer(pb.RegisterConsumerRequest(consumer_group="stopping"), timeout=30)
            except grpc.RpcError as exc:
                errors.append(exc)

        caller = threading.Thread(target=waiting)
        caller.start()
        time.sleep(0.2)
        b.broker.coordination.stop(grace=0.2)
        caller.join(10)
        ch.close()
    assert not caller.is_alive() and errors
    assert not [t for t in threading.enumerate() if t.name.startswith("rill-grpc-aio")]


def test_port_in_use_is_an_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(RuntimeError, match="cannot bind the gRPC server"):
            with running_broker(tmp_path / "d", grpc_server="aio", grpc_port=taken.getsockname()[1]):
                pass  # pragma: no cover
    assert not [t for t in threading.enumerate() if t.name.startswith("rill-grpc-aio")]


def test_grpc_server_setting_is_checked() -> None:
    assert BrokerConfig.load(None, {})["grpc.server"] == "sync"
    assert BrokerConfig.load(None, {"grpc.server": "aio"})["grpc.server"] == "aio"
    with pytest.raises(ConfigError, match="grpc.server: expected one of sync, aio"):
        BrokerConfig.load(None, {"grpc.server": "async"})


@pytest.mark.parametrize("kind", ["sync", "aio"])
def test_calls_are_logged_with_rpc_and_request_id(kind: str, tmp_path: Path) -> None:
    """Events logged while answering (on the loop or a worker thread) carry the rpc and the caller's request id."""
    with running_broker(tmp_path / "d", grpc_server=kind) as b, \
            capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs, \
            grpc.insecure_channel(b.grpc_address) as ch:
        s = pb_grpc.GroupCoordinatorStub(ch)
        s.CreateGroup(pb.CreateGroupRequest(consumer_group="logged", session_timeout=10_000), timeout=TIMEOUT,
                      metadata=[("x-request-id", "req-1")])
        s.CreateGroup(pb.CreateGroupRequest(consumer_group="logged-too", session_timeout=10_000), timeout=TIMEOUT)
    created = {e["group"]: e for e in logs if e["event"] == "group.created"}
    assert created["logged"]["request_id"] == "req-1"
    assert created["logged"]["rpc"] == created["logged-too"]["rpc"] == "/rill.v1.GroupCoordinator/CreateGroup"
    assert created["logged-too"]["request_id"] not in ("", "req-1")


@pytest.mark.parametrize("kind", ["sync", "aio"])
def test_a_deliberate_abort_is_not_logged_as_a_failure(kind: str, tmp_path: Path) -> None:
    """A RegisterConsumer that ends at its deadline (the server aborts it) logs no rpc.failed traceback."""
    with running_broker(tmp_path / "d", grpc_server=kind) as b, grpc.insecure_channel(b.grpc_address) as ch:
        s = pb_grpc.GroupCoordinatorStub(ch)
        grpc_tests.create(s, "aborts", ["t"])
        grpc_tests.register(s, "aborts")
        with capture_logs() as events:
            with pytest.raises(grpc.RpcError):
                s.RegisterConsumer(pb.RegisterConsumerRequest(consumer_group="aborts"), timeout=0.3)
            time.sleep(0.6)  # the server side gives up at the same deadline
    assert not [e for e in events if e["event"] == "rpc.failed"]
