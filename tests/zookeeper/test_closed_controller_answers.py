"""A stopping broker that was the controller answers ControlledShutdown NOT_CONTROLLER at once once its
controller has closed (another broker takes over), instead of waiting 30 s for a worker that has stopped.

Seen when SIGTERM reached all three brokers of a cluster together: the other brokers'
ControlledShutdown requests reached the controller's broker after its controller had
closed and each handler waited the whole 30 s ("the controlled shutdown of broker 1 was
not done in 30s"), holding that process's exit.
"""

from __future__ import annotations

import time
from pathlib import Path

from rill.broker.testing import running_broker
from rill.v1 import replication_pb2 as rpb
from tests.zookeeper.controller_support import wait_for


def test_controlled_shutdown_to_a_closed_controller_is_refused_at_once(tmp_path: Path, zk_connect: str) -> None:
    """After Broker.close(), ControlledShutdown answers NOT_CONTROLLER within a second."""
    with running_broker(tmp_path / "data", broker_id=1, zookeeper_connect=zk_connect,
                        zookeeper_session_timeout_ms=4000) as b:
        assert b.broker.controller is not None
        wait_for(lambda: b.broker.controller is not None and b.broker.controller.is_active, what="the controller")
        servicer = b.broker.replica_control
        b.close()
        began = time.monotonic()
        answer = servicer.ControlledShutdown(rpb.ControlledShutdownRequest(broker_id=2, broker_epoch=5), None)
        took = time.monotonic() - began
    assert answer.error == rpb.ReplicaControlError.NOT_CONTROLLER
    assert took < 1.0, f"answered after {took:.1f} s"
