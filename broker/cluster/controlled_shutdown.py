"""A stopping broker asks the controller to move its leaderships away first (Kafka's controlled shutdown).

On SIGTERM, with ``controlled.shutdown.enable`` and replicas held here, the broker sends
ControlledShutdown to the controller (found through ``/rill/controller`` and the
registry: the address ``client`` calls, its TLS gRPC port when brokers call each other over TLS),
carrying its broker epoch (the czxid of its ``/brokers/ids/[id]`` node, so an
earlier life of the id cannot speak for it). The controller elects new leaders for the
partitions it leads and takes it out of the ISRs, tells every broker (this one included:
it becomes a follower while its data plane still serves, so producers get
NotLeaderForPartition and move), and answers with the partitions it still leads (those
with no other in-sync replica). The broker retries while that list is not empty or the
call fails, at most ``controlled.shutdown.max.retries`` times ``controlled.shutdown.retry.backoff.ms``
apart, then stops anyway (Kafka's order, ../shared/notes/replication.md 3.3).

Runs on the thread that stops the broker, before the event loop stops.
"""

from __future__ import annotations

import time

import grpc
import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from rill.broker.cluster.replica_control_servicer import ReplicaControlClient
from rill.client.zookeeper.registry import IDS_PATH, RegistryView
from rill.client.zookeeper.replica_layout import CONTROLLER_PATH, ControllerInfo
from rill.v1 import replication_pb2 as rpb

__all__ = ["request_controlled_shutdown"]

log = structlog.get_logger(__name__)


def request_controlled_shutdown(zk: KazooClient, registry: RegistryView, client: ReplicaControlClient, broker_id: int,
                                *, retries: int, backoff_s: float, timeout_s: float) -> bool:
    """Ask the controller to move leadership off ``broker_id``; True once it leads nothing replicated.

    Never raises: every failure is logged and retried, and after ``retries`` attempts the
    broker stops anyway (False).
    """
    began = time.monotonic()
    for attempt in range(1, max(retries, 1) + 1):
        remaining = _attempt(zk, registry, client, broker_id, timeout_s)
        if remaining == 0:
            log.info("controlled_shutdown.succeeded", broker_id=broker_id, attempts=attempt,
                     seconds=round(time.monotonic() - began, 3))
            return True
        if attempt < retries:
            time.sleep(backoff_s)
    log.warning("controlled_shutdown.gave_up", broker_id=broker_id, attempts=retries,
                detail="stopping with leaderships still here: their partitions wait for the controller's election")
    return False


def _attempt(zk: KazooClient, registry: RegistryView, client: ReplicaControlClient, broker_id: int,
             timeout_s: float) -> int:
    """One request; the number of partitions still led here (-1 when the request failed)."""
    try:
        controller, epoch = _controller_and_epoch(zk, broker_id, timeout_s)
    except (KazooException, KazooTimeoutError, ValueError) as exc:
        log.warning("controlled_shutdown.zookeeper_failed", error=str(exc) or type(exc).__name__)
        return -1
    if controller is None or epoch is None:
        log.warning("controlled_shutdown.no_controller" if controller is None else "controlled_shutdown.unregistered",
                    broker_id=broker_id)
        return -1
    target = registry.snapshot.brokers.get(controller.broker_id)
    if target is None or target.grpc_port <= 0:
        log.warning("controlled_shutdown.controller_unknown", controller_id=controller.broker_id)
        return -1
    try:
        response = client.controlled_shutdown(client.address(target),
                                              rpb.ControlledShutdownRequest(broker_id=broker_id, broker_epoch=epoch),
                                              timeout_s)
    except grpc.RpcError as exc:
        log.warning("controlled_shutdown.request_failed", controller_id=controller.broker_id,
                    error=str(exc.code()) if hasattr(exc, "code") else str(exc))
        return -1
    if response.error != rpb.ReplicaControlError.NONE:
        log.warning("controlled_shutdown.refused", controller_id=controller.broker_id,
                    error=rpb.ReplicaControlError.Code.Name(response.error))
        return -1
    if response.remaining:
        log.info("controlled_shutdown.partitions_remaining", count=len(response.remaining),
                 first=[f"{tp.topic}-{tp.partition}" for tp in response.remaining[:5]])
    return len(response.remaining)


def _controller_and_epoch(zk: KazooClient, broker_id: int, timeout_s: float) -> tuple[ControllerInfo | None, int | None]:
    """The controller and this broker's epoch, both read at once and each bounded by ``timeout_s``.

    kazoo's blocking reads wait for ever for a connection that may not come back: a read
    queued while ZooKeeper is unreachable (a broker told to stop after its ZooKeeper is
    gone) would keep the broker from stopping. Raises KazooTimeoutError (the read did not
    complete in time), a KazooException, or ValueError (a malformed controller node).
    """
    controller_read = zk.get_async(CONTROLLER_PATH)
    registration_read = zk.exists_async(f"{IDS_PATH}/{broker_id}")
    try:
        data, _ = controller_read.get(timeout=timeout_s)
        controller: ControllerInfo | None = ControllerInfo.decode(data)
    except NoNodeError:
        controller = None
    stat = registration_read.get(timeout=timeout_s)
    return controller, None if stat is None else int(stat.czxid)

