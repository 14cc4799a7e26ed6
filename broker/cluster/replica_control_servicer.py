"""The ReplicaControl gRPC service (proto/rill/v1/replication.proto): both ends.

**Broker side** (:class:`ReplicaControlServicer`, a thin adapter):

- ``LeaderAndIsr`` sets the replication throttle it carries (replication_throttle.py) and
  passes the request's controller epoch through a
  :class:`ControllerEpochFence` (an epoch below the highest seen is refused
  STALE_CONTROLLER_EPOCH), converts each entry to a
  :class:`~rill.broker.replication.replica.PartitionRole` and hands them to a
  :class:`RoleApplier` (the replica manager). Requests are applied one at a time, under
  the fence's lock, so an admitted epoch is never overtaken by an older one. A broker
  whose event loop has stopped (it is stopping) answers gRPC UNAVAILABLE at once: the
  call failed, as if the broker were gone already (the controller sends again while the
  broker stays registered), and no handler waits for a loop that will not run.
- ``ControlledShutdown`` goes to the local :class:`ShutdownHandler` (the controller)
  when this broker has one; its domain errors become ``ReplicaControlError`` codes.
- ``LeaveIsr`` (a broker healing corrupt data, replica_healer.py) goes to the local
  :class:`IsrExitHandler` (the controller, controller_isr_exits.py) the same way.

**Controller side** (:class:`ReplicaControlClient`): one gRPC channel per broker
address, reused across requests, closed by :meth:`ReplicaControlClient.forget` when
the broker leaves and by :meth:`ReplicaControlClient.close`. Every call carries the
cluster's broker token when one is given, so the receiver's ACLs (ClusterAction on the
Cluster) see ``principal.BROKER``.

Value conversions (:func:`role_to_proto`, :func:`roles_from_request`,
:func:`brokers_to_proto`, :func:`brokers_from_request`) are pure functions.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Protocol, runtime_checkable

import grpc
import structlog

from rill.broker.dataplane.event_loop import LoopStopped
from rill.broker.replication.replica import PartitionRole
from rill.broker.replication.replication_throttle import ReplicationThrottle
from rill.client.protocol import requests as rq
from rill.coordinator.grpc_server import Registration
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import replication_pb2 as rpb
from rill.v1 import replication_pb2_grpc as rpb_grpc
from rill.broker.security.inter_broker_grpc import PLAINTEXT_GRPC, InterBrokerGrpc
from rill.client.grpc_channels import broker_channel
from rill.client.zookeeper.registry import BrokerRegistration

__all__ = [
    "BrokerNotAvailable", "ControllerEpochFence", "IsrExitHandler", "NotController", "ReplicaControlClient", "ReplicaControlServicer",
    "RoleApplier", "ShutdownHandler", "StaleBrokerEpoch", "brokers_from_request", "brokers_to_proto",
    "registration", "role_to_proto", "roles_from_request",
]

log = structlog.get_logger(__name__)

SERVICE_NAME: str = rpb.DESCRIPTOR.services_by_name["ReplicaControl"].full_name
Error = rpb.ReplicaControlError


class NotController(Exception):
    """This broker is not (or no longer) the controller. ``controller_id``: the one known, -1 if none."""

    def __init__(self, message: str, controller_id: int = -1) -> None:
        super().__init__(message)
        self.controller_id = controller_id


class StaleBrokerEpoch(Exception):
    """A ControlledShutdown's broker epoch is not that of the broker's current registration."""


class BrokerNotAvailable(Exception):
    """A ControlledShutdown from a broker the controller does not see live."""


class RoleApplier(Protocol):
    """What LeaderAndIsr drives on a broker (the replica manager implements it)."""

    def apply_roles(self, controller_id: int, controller_epoch: int, roles: Sequence[PartitionRole],
                    brokers: Sequence[rq.BrokerInfo], full: bool) -> Mapping[tuple[str, int], int]:
        """Apply the roles of the partitions whose ``replicas`` include this broker; the rest is metadata.

        ``controller_epoch`` has passed the fence already (never below one applied
        before). The applier ignores a role whose ``leader_epoch`` is below the one it
        holds for that partition (a late duplicate). With ``full`` the roles list every
        replicated partition of the cluster.

        Returns:
            (topic, partition) -> wire error code (``rill.client.errors.ErrorCode``), 0 when applied.

        Raises:
            LoopStopped: this broker is stopping; nothing was applied.
        """
        ...


class ShutdownHandler(Protocol):
    """The controller's side of ControlledShutdown."""

    def controlled_shutdown(self, broker_id: int, broker_epoch: int | None = None, *,
                            timeout_s: float = 30.0) -> list[tuple[str, int]]:
        """Move leadership off ``broker_id``; returns the partitions (factor > 1) it still leads.

        Raises:
            NotController, StaleBrokerEpoch, BrokerNotAvailable, TimeoutError.
        """
        ...


@runtime_checkable
class IsrExitHandler(Protocol):
    """The controller's side of LeaveIsr."""

    def leave_isr(self, broker_id: int, broker_epoch: int | None, partitions: Sequence[tuple[str, int]], *,
                  timeout_s: float = 30.0) -> list[tuple[str, int]]:
        """Take ``broker_id`` out of the ISRs of ``partitions``; returns those whose ISR still lists it.

        Raises:
            NotController, StaleBrokerEpoch, BrokerNotAvailable, TimeoutError.
        """
        ...


class ControllerEpochFence:
    """The highest controller epoch heard; refuses lower ones (Kafka's STALE_CONTROLLER_EPOCH).

    Thread-safe. ``lock`` is held by the servicer across check and apply, so requests
    are applied one at a time in the order they were admitted.
    """

    def __init__(self, highest: int = -1) -> None:
        self.lock = threading.Lock()
        self._highest = highest

    @property
    def highest(self) -> int:
        """The highest epoch admitted so far (-1: none)."""
        return self._highest

    def admit(self, epoch: int) -> bool:
        """True (and remember ``epoch``) unless it is below the highest seen. Call with ``lock`` held."""
        if epoch < self._highest:
            return False
        self._highest = epoch
        return True


# -- conversions ------------------------------------------------------------------------------

def role_to_proto(role: PartitionRole) -> rpb.PartitionLeadership:
    """One role as a LeaderAndIsr entry."""
    return rpb.PartitionLeadership(topic=role.topic, partition=role.partition, leader=role.leader,
                                   leader_epoch=role.leader_epoch, isr=role.isr, replicas=role.replicas,
                                   zk_version=role.zk_version, min_insync_replicas=role.min_insync,
                                   adding_replicas=role.adding, removing_replicas=role.removing,
                                   log_settings=dict(role.log_settings))


def roles_from_request(request: rpb.LeaderAndIsrRequest) -> list[PartitionRole]:
    """The request's entries as roles, in request order."""
    return [PartitionRole(p.topic, p.partition, p.leader, p.leader_epoch, tuple(p.isr), tuple(p.replicas),
                          p.zk_version, p.min_insync_replicas, tuple(p.adding_replicas), tuple(p.removing_replicas),
                          tuple(sorted(p.log_settings.items())))
            for p in request.partitions]


def brokers_to_proto(brokers: Iterable[rq.BrokerInfo]) -> list[pb.Broker]:
    return [pb.Broker(broker_id=b.broker_id, host=b.host, port=b.port, grpc_port=b.grpc_port) for b in brokers]


def brokers_from_request(request: rpb.LeaderAndIsrRequest) -> list[rq.BrokerInfo]:
    return [rq.BrokerInfo(b.broker_id, b.host, b.port, b.grpc_port) for b in request.live_brokers]


# -- the broker's side -------------------------------------------------------------------------

class ReplicaControlServicer(rpb_grpc.ReplicaControlServicer):
    """LeaderAndIsr into a RoleApplier behind the epoch fence; ControlledShutdown into the local controller."""

    def __init__(self, applier: RoleApplier, controller: ShutdownHandler | None = None,
                 fence: ControllerEpochFence | None = None, *, shutdown_timeout_s: float = 30.0,
                 throttle: ReplicationThrottle | None = None) -> None:
        self.applier = applier
        self.throttle = throttle  # takes the replication throttle each LeaderAndIsr carries
        self.controller = controller
        self.fence = fence or ControllerEpochFence()
        self.shutdown_timeout_s = shutdown_timeout_s

    def LeaderAndIsr(self, request: rpb.LeaderAndIsrRequest, context: Any) -> rpb.LeaderAndIsrResponse:
        with self.fence.lock:
            if not self.fence.admit(request.controller_epoch):
                log.warning("replica_control.stale_controller_epoch", controller_id=request.controller_id,
                            controller_epoch=request.controller_epoch, highest=self.fence.highest)
                return rpb.LeaderAndIsrResponse(error=Error.STALE_CONTROLLER_EPOCH)
            rate = request.replication_throttle_bytes_per_second
            if self.throttle is not None and self.throttle.set_rate(max(0, rate)):
                log.info("replica_control.throttle_changed", bytes_per_second=rate,
                         controller_epoch=request.controller_epoch)
            try:
                codes = self.applier.apply_roles(request.controller_id, request.controller_epoch,
                                                 roles_from_request(request), brokers_from_request(request),
                                                 request.full)
            except LoopStopped as exc:
                log.info("replica_control.broker_stopping", controller_id=request.controller_id,
                         controller_epoch=request.controller_epoch, partitions=len(request.partitions))
                context.abort(grpc.StatusCode.UNAVAILABLE, f"broker is stopping: LeaderAndIsr not applied ({exc})")
                raise  # abort raised already; a context that does not (a test's) still fails the call
        return rpb.LeaderAndIsrResponse(
            error=Error.NONE,
            partitions=[rpb.PartitionResult(topic=t, partition=p, code=c) for (t, p), c in sorted(codes.items())])

    def ControlledShutdown(self, request: rpb.ControlledShutdownRequest,
                           context: Any) -> rpb.ControlledShutdownResponse:
        if self.controller is None:
            return rpb.ControlledShutdownResponse(error=Error.NOT_CONTROLLER, controller_id=-1)
        try:
            remaining = self.controller.controlled_shutdown(request.broker_id, request.broker_epoch,
                                                            timeout_s=self.shutdown_timeout_s)
        except NotController as exc:
            return rpb.ControlledShutdownResponse(error=Error.NOT_CONTROLLER, controller_id=exc.controller_id)
        except (StaleBrokerEpoch, BrokerNotAvailable, TimeoutError) as exc:
            log.warning("replica_control.controlled_shutdown_refused", broker_id=request.broker_id,
                        broker_epoch=request.broker_epoch, error=str(exc) or type(exc).__name__)
            return rpb.ControlledShutdownResponse(error=_SHUTDOWN_CODES[type(exc)], controller_id=-1)
        except Exception:
            log.exception("replica_control.controlled_shutdown_failed", broker_id=request.broker_id)
            return rpb.ControlledShutdownResponse(error=Error.UNKNOWN, controller_id=-1)
        return rpb.ControlledShutdownResponse(
            error=Error.NONE, remaining=[pb.TopicPartition(topic=t, partition=p) for t, p in remaining])


    def LeaveIsr(self, request: rpb.LeaveIsrRequest, context: Any) -> rpb.LeaveIsrResponse:
        controller = self.controller
        if not isinstance(controller, IsrExitHandler):
            return rpb.LeaveIsrResponse(error=Error.NOT_CONTROLLER, controller_id=-1)
        asked = [(tp.topic, tp.partition) for tp in request.partitions]
        try:
            remaining = controller.leave_isr(request.broker_id, request.broker_epoch, asked,
                                             timeout_s=self.shutdown_timeout_s)
        except NotController as exc:
            return rpb.LeaveIsrResponse(error=Error.NOT_CONTROLLER, controller_id=exc.controller_id)
        except (StaleBrokerEpoch, BrokerNotAvailable, TimeoutError) as exc:
            log.warning("replica_control.leave_isr_refused", broker_id=request.broker_id,
                        broker_epoch=request.broker_epoch, error=str(exc) or type(exc).__name__)
            return rpb.LeaveIsrResponse(error=_SHUTDOWN_CODES[type(exc)], controller_id=-1)
        except Exception:
            log.exception("replica_control.leave_isr_failed", broker_id=request.broker_id)
            return rpb.LeaveIsrResponse(error=Error.UNKNOWN, controller_id=-1)
        return rpb.LeaveIsrResponse(
            error=Error.NONE, remaining=[pb.TopicPartition(topic=t, partition=p) for t, p in remaining])


_SHUTDOWN_CODES: dict[type[Exception], rpb.ReplicaControlError.Code] = {
    StaleBrokerEpoch: Error.STALE_BROKER_EPOCH,
    BrokerNotAvailable: Error.BROKER_NOT_AVAILABLE,
    TimeoutError: Error.REQUEST_TIMED_OUT,
}


def registration(servicer: ReplicaControlServicer) -> Registration:
    """The service for ``rill.coordinator.grpc_server.create_server`` (the broker's sync gRPC server)."""
    return Registration(servicer, rpb_grpc.add_ReplicaControlServicer_to_server, SERVICE_NAME)


# -- the controller's side -----------------------------------------------------------------------

class ReplicaControlClient:
    """The controller's stubs: one channel per broker id, reused while its address stays the same.

    Thread-safe. Addresses are ``"host:port"``, as :meth:`address` gives them. ``token()`` is the
    cluster's broker token, sent with every call (None: the calls are anonymous, which only brokers
    without authorizer.enable accept). ``via`` says where and how peers are called: their registered
    plaintext gRPC port by default, or the inter-broker listener's TLS gRPC port over TLS
    (rill.broker.security.inter_broker_grpc).
    """

    def __init__(self, token: Callable[[], str] | None = None, via: InterBrokerGrpc = PLAINTEXT_GRPC) -> None:
        self.token = token
        self.via = via
        self._lock = threading.Lock()
        self._stubs: dict[str, tuple[grpc.Channel, Any]] = {}

    def address(self, registration: BrokerRegistration) -> str:
        """Where this client calls ``registration``'s ReplicaControl: ``"host:port"``."""
        return self.via.address(registration)

    def _stub(self, address: str) -> Any:
        with self._lock:
            found = self._stubs.get(address)
            if found is None:
                channel = broker_channel(address, self.token, self.via.credentials)
                found = self._stubs[address] = (channel, rpb_grpc.ReplicaControlStub(channel))  # type: ignore[no-untyped-call]
            return found[1]

    def leader_and_isr(self, address: str, request: rpb.LeaderAndIsrRequest,
                       timeout: float) -> rpb.LeaderAndIsrResponse:
        """Send one LeaderAndIsr and wait for the answer.

        Raises:
            grpc.RpcError: the call failed (DEADLINE_EXCEEDED after ``timeout`` seconds, UNAVAILABLE ...).
        """
        return self._stub(address).LeaderAndIsr(request, timeout=timeout)  # type: ignore[no-any-return]

    def leader_and_isr_all(self, requests: Mapping[str, rpb.LeaderAndIsrRequest],
                           timeout: float) -> dict[str, rpb.LeaderAndIsrResponse | grpc.RpcError]:
        """Send each address its request at once, then wait for all (each within ``timeout`` seconds).

        Returns:
            address -> its response, or the ``grpc.RpcError`` its call failed with. Never raises
            an RpcError itself.
        """
        pending: dict[str, Future[Any]] = {
            address: self._stub(address).LeaderAndIsr.future(request, timeout=timeout)
            for address, request in requests.items()}
        answers: dict[str, rpb.LeaderAndIsrResponse | grpc.RpcError] = {}
        for address, call in pending.items():
            try:
                answers[address] = call.result()
            except grpc.RpcError as exc:
                answers[address] = exc
        return answers

    def controlled_shutdown(self, address: str, request: rpb.ControlledShutdownRequest,
                            timeout: float) -> rpb.ControlledShutdownResponse:
        """A stopping broker's request to the controller at ``address``. Raises grpc.RpcError."""
        return self._stub(address).ControlledShutdown(request, timeout=timeout)  # type: ignore[no-any-return]

    def leave_isr(self, address: str, request: rpb.LeaveIsrRequest, timeout: float) -> rpb.LeaveIsrResponse:
        """A healing broker's request to the controller at ``address``. Raises grpc.RpcError."""
        return self._stub(address).LeaveIsr(request, timeout=timeout)  # type: ignore[no-any-return]

    def forget(self, address: str) -> None:
        """Close the channel to ``address`` (its broker left); a later send opens a new one."""
        with self._lock:
            found = self._stubs.pop(address, None)
        if found is not None:
            found[0].close()

    def close(self) -> None:
        """Close every channel. The client stays usable (new sends open new channels)."""
        with self._lock:
            stubs, self._stubs = self._stubs, {}
        for channel, _ in stubs.values():
            channel.close()
