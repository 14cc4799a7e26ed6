"""The ReplicaControl service over a real gRPC server on port 0: the epoch fence, conversions and error codes."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent import futures

import grpc
import pytest

from rill.broker.cluster.replica_control_servicer import (BrokerNotAvailable, ControllerEpochFence, NotController,
                                                          ReplicaControlClient, ReplicaControlServicer,
                                                          StaleBrokerEpoch, brokers_to_proto, role_to_proto,
                                                          roles_from_request)
from rill.broker.dataplane.event_loop import LoopStopped
from rill.broker.replication.replica import PartitionRole
from rill.client.errors import ErrorCode
from rill.client.protocol import requests as rq
from rill.v1 import replication_pb2 as rpb
from rill.v1 import replication_pb2_grpc as rpb_grpc

ROLE = PartitionRole("orders", 3, 2, 7, (2, 1), (1, 2, 3), 11)


class Applier:
    """Records (epoch, roles, brokers, full) per call; partition 0 of any topic answers NOT_LEADER_FOR_PARTITION."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, tuple[PartitionRole, ...], tuple[rq.BrokerInfo, ...], bool]] = []
        self.lock = threading.Lock()

    def apply_roles(self, controller_id: int, controller_epoch: int, roles: Sequence[PartitionRole],
                    brokers: Sequence[rq.BrokerInfo], full: bool) -> Mapping[tuple[str, int], int]:
        with self.lock:
            self.calls.append((controller_epoch, tuple(roles), tuple(brokers), full))
        return {(r.topic, r.partition): ErrorCode.NOT_LEADER_FOR_PARTITION if r.partition == 0 else 0 for r in roles}


class Handler:
    """A ShutdownHandler that raises ``error`` or answers ``remaining``."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error

    def controlled_shutdown(self, broker_id: int, broker_epoch: int | None = None, *,
                            timeout_s: float = 30.0) -> list[tuple[str, int]]:
        if self.error is not None:
            raise self.error
        return [("orders", 1)]


@pytest.fixture
def applier() -> Applier:
    return Applier()


@pytest.fixture
def address(applier: Applier) -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    rpb_grpc.add_ReplicaControlServicer_to_server(ReplicaControlServicer(applier), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(0)


def request(epoch: int, *roles: PartitionRole, full: bool = False) -> rpb.LeaderAndIsrRequest:
    return rpb.LeaderAndIsrRequest(controller_id=1, controller_epoch=epoch, partitions=[role_to_proto(r) for r in roles],
                                   live_brokers=brokers_to_proto([rq.BrokerInfo(1, "h", 9092, 9093)]), full=full)


def test_roles_survive_the_wire(applier: Applier, address: str) -> None:
    """A LeaderAndIsr reaches the applier as the same roles, brokers and full flag, and its codes come back."""
    client = ReplicaControlClient()
    try:
        answer = client.leader_and_isr(address, request(4, ROLE, PartitionRole("t", 0, -1, 1, (3,), (3,), 0, 2),
                                                        full=True), timeout=5)
    finally:
        client.close()
    assert answer.error == rpb.ReplicaControlError.NONE
    assert [(p.topic, p.partition, p.code) for p in answer.partitions] == [("orders", 3, 0), ("t", 0, 14)]
    ((epoch, roles, brokers, full),) = applier.calls
    assert (epoch, full, brokers) == (4, True, (rq.BrokerInfo(1, "h", 9092, 9093),))
    assert roles[0] == ROLE and roles[1].leader == -1 and roles[1].min_insync == 2
    assert roles_from_request(request(1, ROLE)) == [ROLE]


def test_lower_controller_epoch_is_refused(applier: Applier, address: str) -> None:
    """A LeaderAndIsr with a controller epoch below one already applied is refused STALE_CONTROLLER_EPOCH
    and never reaches the applier; the same epoch again is applied."""
    client = ReplicaControlClient()
    try:
        assert client.leader_and_isr(address, request(5, ROLE), timeout=5).error == rpb.ReplicaControlError.NONE
        stale = client.leader_and_isr(address, request(4, ROLE), timeout=5)
        again = client.leader_and_isr(address, request(5, ROLE), timeout=5)
    finally:
        client.close()
    assert stale.error == rpb.ReplicaControlError.STALE_CONTROLLER_EPOCH and not stale.partitions
    assert again.error == rpb.ReplicaControlError.NONE
    assert [call[0] for call in applier.calls] == [5, 5]


class StoppingApplier(Applier):
    """A broker whose event loop has stopped: every apply_roles raises LoopStopped."""

    def apply_roles(self, controller_id: int, controller_epoch: int, roles: Sequence[PartitionRole],
                    brokers: Sequence[rq.BrokerInfo], full: bool) -> Mapping[tuple[str, int], int]:
        raise LoopStopped("the event loop has stopped")


def test_leader_and_isr_to_a_stopping_broker_fails_unavailable_at_once() -> None:
    """A LeaderAndIsr reaching a broker whose loop has stopped ends at once as UNAVAILABLE (the controller's
    'send failed': it sends again while the broker stays live), not after the caller's deadline."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    rpb_grpc.add_ReplicaControlServicer_to_server(ReplicaControlServicer(StoppingApplier()), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    client = ReplicaControlClient()
    try:
        with pytest.raises(grpc.RpcError) as failed:
            client.leader_and_isr(f"127.0.0.1:{port}", request(1, ROLE), timeout=5)
    finally:
        client.close()
        server.stop(0)
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
    assert "stopping" in failed.value.details()  # type: ignore[attr-defined]


def test_fence_admits_only_rising_epochs() -> None:
    """The fence remembers the highest epoch and refuses lower ones."""
    fence = ControllerEpochFence()
    with fence.lock:
        assert fence.admit(3) and fence.admit(3) and not fence.admit(2) and fence.admit(9)
    assert fence.highest == 9


@pytest.mark.parametrize(("handler", "code"), [
    (None, rpb.ReplicaControlError.NOT_CONTROLLER),
    (Handler(NotController("no", 4)), rpb.ReplicaControlError.NOT_CONTROLLER),
    (Handler(StaleBrokerEpoch("old")), rpb.ReplicaControlError.STALE_BROKER_EPOCH),
    (Handler(BrokerNotAvailable("gone")), rpb.ReplicaControlError.BROKER_NOT_AVAILABLE),
    (Handler(TimeoutError()), rpb.ReplicaControlError.REQUEST_TIMED_OUT),
    (Handler(RuntimeError("bug")), rpb.ReplicaControlError.UNKNOWN),
    (Handler(), rpb.ReplicaControlError.NONE),
])
def test_controlled_shutdown_error_codes(applier: Applier, handler: Handler | None, code: int) -> None:
    """Each outcome of the local controller is one ControlledShutdown error code; success lists what is still led."""
    servicer = ReplicaControlServicer(applier, handler)
    answer = servicer.ControlledShutdown(rpb.ControlledShutdownRequest(broker_id=1, broker_epoch=5), None)
    assert answer.error == code
    assert [(tp.topic, tp.partition) for tp in answer.remaining] == ([("orders", 1)] if code == 0 else [])
    if isinstance(handler, Handler) and isinstance(handler.error, NotController):
        assert answer.controller_id == 4


def test_unreachable_broker_is_an_answer_not_an_exception() -> None:
    """Sending to a broker that does not listen yields its RpcError among the answers; forget() closes its channel."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{probe.getsockname()[1]}"
    client = ReplicaControlClient()
    try:
        answers = client.leader_and_isr_all({dead: request(1, ROLE)}, timeout=1.0)
        assert isinstance(answers[dead], grpc.RpcError)
        client.forget(dead)
        client.forget(dead)
    finally:
        client.close()


def test_topic_min_insync_is_read_from_its_config() -> None:
    """The controller sends a topic's own min.insync.replicas, and 0 (the broker's) when absent or malformed."""
    from rill.broker.cluster.controller_context import min_insync_for
    from rill.client.zookeeper.replica_layout import TopicReplicas

    assert min_insync_for(TopicReplicas(((1, 2),), {"min.insync.replicas": "2"})) == 2
    assert min_insync_for(TopicReplicas(((1, 2),))) == 0
    assert min_insync_for(TopicReplicas(((1, 2),), {"min.insync.replicas": "-3"})) == 0
