"""LeaveIsr over a real gRPC server on port 0: the partitions reach the controller, its errors become codes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from concurrent import futures

import grpc
import pytest

from rill.broker.cluster.replica_control_servicer import (BrokerNotAvailable, NotController, ReplicaControlClient,
                                                          ReplicaControlServicer, StaleBrokerEpoch)
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import replication_pb2 as rpb
from rill.v1 import replication_pb2_grpc as rpb_grpc
from tests.unit.cluster.test_replica_control import Applier

Error = rpb.ReplicaControlError


class Exits:
    """An IsrExitHandler that records its calls, and raises ``error`` or keeps ("orders", 1) in the ISR."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.calls: list[tuple[int, int | None, list[tuple[str, int]]]] = []

    def controlled_shutdown(self, broker_id: int, broker_epoch: int | None = None, *,
                            timeout_s: float = 30.0) -> list[tuple[str, int]]:
        return []

    def leave_isr(self, broker_id: int, broker_epoch: int | None, partitions: Sequence[tuple[str, int]], *,
                  timeout_s: float = 30.0) -> list[tuple[str, int]]:
        self.calls.append((broker_id, broker_epoch, list(partitions)))
        if self.error is not None:
            raise self.error
        return [key for key in partitions if key == ("orders", 1)]


@contextlib.contextmanager
def serve(controller: object) -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = ReplicaControlServicer(Applier(), controller)  # type: ignore[arg-type]
    rpb_grpc.add_ReplicaControlServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(0)


def leave(address: str) -> rpb.LeaveIsrResponse:
    client = ReplicaControlClient()
    try:
        return client.leave_isr(address, rpb.LeaveIsrRequest(
            broker_id=2, broker_epoch=77, partitions=[pb.TopicPartition(topic="orders", partition=p) for p in (0, 1)]),
            timeout=5)
    finally:
        client.close()


def test_partitions_reach_the_controller_and_remaining_come_back() -> None:
    """The controller gets the broker, its epoch and the partitions; the answer lists those it could not leave."""
    exits = Exits()
    with serve(exits) as address:
        answer = leave(address)
    assert exits.calls == [(2, 77, [("orders", 0), ("orders", 1)])]
    assert answer.error == Error.NONE
    assert [(tp.topic, tp.partition) for tp in answer.remaining] == [("orders", 1)]


@pytest.mark.parametrize("controller, code", [
    (None, Error.NOT_CONTROLLER),
    (Exits(NotController("no", 3)), Error.NOT_CONTROLLER),
    (Exits(StaleBrokerEpoch("old")), Error.STALE_BROKER_EPOCH),
    (Exits(BrokerNotAvailable("gone")), Error.BROKER_NOT_AVAILABLE),
    (Exits(TimeoutError()), Error.REQUEST_TIMED_OUT),
    (Exits(RuntimeError("bug")), Error.UNKNOWN),
])
def test_refusals_are_codes(controller: object, code: int) -> None:
    """Each refusal of the controller (or no controller here) is a ReplicaControlError code, never a gRPC error."""
    with serve(controller) as address:
        assert leave(address).error == code
