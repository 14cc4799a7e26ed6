"""What an Admin RPC answers when its controller call did not happen: NOT_CONTROLLER or REQUEST_TIMED_OUT.

Only the controller elects leaders, moves partitions and adds them. A broker asked one
of those Admin RPCs hands it to its own controller role (elect_leaders.py says why it
does not forward); when that role is not the controller the answer is NOT_CONTROLLER
with the controller's address as the registry lists it (its TLS gRPC port, to a call that
came in over TLS), so that rill's AdminClient asks there, as it called here, and a call the controller did not finish in time is REQUEST_TIMED_OUT (it may
still happen). The same two answers in every such RPC, written once here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from rill.broker.cluster.replica_control_servicer import NotController
from rill.client.zookeeper.registry import RegistryView
from rill.coordinator.grpc_auth import called_over_tls
from rill.v1 import coordinator_pb2 as pb

__all__ = ["controller_broker", "refusal"]

R = TypeVar("R")


TLS_LISTENERS = ("SASL_SSL", "SSL")  # each advertised with the broker's TLS gRPC port (BrokerSecurity.advertised)


def controller_broker(registry: RegistryView | None, broker_id: int) -> pb.Broker:
    """The broker ``broker_id`` as the registry lists it (only its id, -1 included, when it does not). To a
    call that came in over TLS, the address of its TLS listener and TLS gRPC port, when it has one: a TLS
    client follows the answer with its TLS settings."""
    found = registry.snapshot.brokers.get(broker_id) if registry is not None and broker_id >= 0 else None
    if found is None:
        return pb.Broker(broker_id=broker_id)
    host, port, grpc_port = found.host, found.port, found.grpc_port
    if called_over_tls():
        listener = next((name for name in TLS_LISTENERS if found.lists(name)), None)
        if listener is not None:
            host, port, grpc_port = found.address_for(listener)
        elif found.grpc_tls_port > 0:  # a TLS gRPC port without a TLS data listener
            grpc_port = found.grpc_tls_port
    return pb.Broker(broker_id=broker_id, host=host, port=port, grpc_port=grpc_port)


def refusal(response: Callable[..., R], registry: RegistryView | None, exc: NotController | TimeoutError) -> R:
    """``response`` (the RPC's response type) saying why: NOT_CONTROLLER naming the controller, or REQUEST_TIMED_OUT."""
    if isinstance(exc, NotController):
        return response(error_code=pb.NOT_CONTROLLER, error_message=str(exc),
                        controller=controller_broker(registry, exc.controller_id))
    return response(error_code=pb.REQUEST_TIMED_OUT, error_message=str(exc))
