"""A broker's LeaveIsr call to the controller: the healer's way out of an ISR (replica_healer.py).

The controller is found as for a controlled shutdown (controlled_shutdown.py): its id in
``/rill/controller``, its gRPC address in the registry (its TLS gRPC port over TLS when brokers
call each other so, rill.broker.security.inter_broker_grpc), and the call carries this
broker's epoch (the czxid of its ``/brokers/ids/[id]`` node). One attempt per call: the
healer retries.

Thread-safety: :meth:`ZkIsrExit.leave_isr` runs on the healer's thread (gRPC and kazoo
calls block it, never the event loop); :meth:`close` from any thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import grpc
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from rill.broker.cluster.partition_states import read_controller
from rill.broker.cluster.replica_control_servicer import ReplicaControlClient
from rill.broker.cluster.replicated_topics import read_broker_epoch
from rill.broker.replication.replica_healer import IsrExitFailed
from rill.broker.security.inter_broker_grpc import PLAINTEXT_GRPC, InterBrokerGrpc
from rill.client.zookeeper.registry import RegistryView
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import replication_pb2 as rpb

__all__ = ["ZkIsrExit"]

Key = tuple[str, int]


class ZkIsrExit:
    """Asks the cluster's controller to take ``broker_id`` out of ISRs (the healer's ``IsrExit``)."""

    def __init__(self, zk: KazooClient, registry: RegistryView, broker_id: int, *, timeout_s: float,
                 token: Callable[[], str] | None = None, via: InterBrokerGrpc = PLAINTEXT_GRPC) -> None:
        self.zk = zk
        self.registry = registry
        self.broker_id = broker_id
        self.timeout_s = timeout_s
        # the cluster's broker token (the controller's ACLs let it in), over TLS when ``via`` says so
        self._client = ReplicaControlClient(token, via)

    def leave_isr(self, partitions: Sequence[Key]) -> set[Key]:
        """One LeaveIsr; the partitions whose ISR still lists this broker.

        Raises:
            IsrExitFailed: the controller could not be found or reached, or refused (the reason says which).
        """
        try:
            controller = read_controller(self.zk)
            epoch = read_broker_epoch(self.zk, self.broker_id)
        except (KazooException, ValueError) as exc:
            raise IsrExitFailed(f"ZooKeeper: {exc or type(exc).__name__}") from exc
        if controller is None:
            raise IsrExitFailed("no controller")
        if epoch is None:
            raise IsrExitFailed(f"broker {self.broker_id} is not registered")
        target = self.registry.snapshot.brokers.get(controller.broker_id)
        if target is None or target.grpc_port <= 0:
            raise IsrExitFailed(f"controller {controller.broker_id} is not in the registry")
        request = rpb.LeaveIsrRequest(broker_id=self.broker_id, broker_epoch=epoch,
                                      partitions=[pb.TopicPartition(topic=t, partition=p) for t, p in partitions])
        try:
            response = self._client.leave_isr(self._client.address(target), request, self.timeout_s)
        except grpc.RpcError as exc:
            code = exc.code() if callable(getattr(exc, "code", None)) else exc
            raise IsrExitFailed(f"controller {controller.broker_id}: {code}") from exc
        if response.error != rpb.ReplicaControlError.NONE:
            raise IsrExitFailed(f"controller {controller.broker_id}: "
                                f"{rpb.ReplicaControlError.Code.Name(response.error)}")
        return {(tp.topic, tp.partition) for tp in response.remaining}

    def close(self) -> None:
        self._client.close()
