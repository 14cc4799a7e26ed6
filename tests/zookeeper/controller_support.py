"""Fakes for the controller tests: brokers that are a ZooKeeper registration plus a real ReplicaControl gRPC server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from kazoo.client import KazooClient

from rill.broker.cluster.controller import Controller
from rill.broker.cluster.preferred_election import RebalancePolicy
from rill.broker.cluster.replica_control_servicer import (ReplicaControlClient, ReplicaControlServicer,
                                                          ShutdownHandler)
from rill.broker.replication.replica import PartitionRole
from rill.client.protocol import requests as rq
from rill.client.zookeeper.registry import RegistryView
from rill.v1 import replication_pb2_grpc as rpb_grpc

WAIT_S = 15.0


def wait_for(check: Callable[[], bool], timeout: float = WAIT_S, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@dataclass(frozen=True)
class Applied:
    """One LeaderAndIsr as the applier saw it."""

    controller_id: int
    controller_epoch: int
    roles: tuple[PartitionRole, ...]
    brokers: tuple[rq.BrokerInfo, ...]
    full: bool

    def role(self, topic: str, partition: int) -> PartitionRole:
        return next(r for r in self.roles if (r.topic, r.partition) == (topic, partition))


class RecordingApplier:
    """A RoleApplier that records every call and answers 0 (applied) for each role. Thread-safe."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[Applied] = []

    def apply_roles(self, controller_id: int, controller_epoch: int, roles: Sequence[PartitionRole],
                    brokers: Sequence[rq.BrokerInfo], full: bool) -> Mapping[tuple[str, int], int]:
        with self.lock:
            self.calls.append(Applied(controller_id, controller_epoch, tuple(roles), tuple(brokers), full))
        return {(r.topic, r.partition): 0 for r in roles}

    def snapshot(self) -> list[Applied]:
        with self.lock:
            return list(self.calls)

    def clear(self) -> None:
        with self.lock:
            self.calls.clear()


class FakeBroker:
    """A broker as the controller sees it: a gRPC ReplicaControl server on port 0 and its own ZooKeeper session
    holding ``/brokers/ids/[id]`` and ``/rill/brokers/[id]``, the way registration.py writes them."""

    def __init__(self, zk_connect: str, broker_id: int) -> None:
        self.zk_connect = zk_connect
        self.broker_id = broker_id
        self.applier = RecordingApplier()
        self.servicer = ReplicaControlServicer(self.applier)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        rpb_grpc.add_ReplicaControlServicer_to_server(self.servicer, self.server)
        self.grpc_port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.zk: KazooClient | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def register(self) -> None:
        """Register (again) under a new session."""
        self.zk = KazooClient(hosts=self.zk_connect, timeout=10)
        self.zk.start(timeout=10)
        data_port = 9000 + self.broker_id
        self.zk.create(f"/brokers/ids/{self.broker_id}", f"test-{time.time_ns()}:127.0.0.1:{data_port}".encode(),
                       ephemeral=True, makepath=True)
        self.zk.create(f"/rill/brokers/{self.broker_id}",
                       json.dumps({"host": "127.0.0.1", "port": data_port, "grpc_port": self.grpc_port}).encode(),
                       ephemeral=True, makepath=True)

    def unregister(self) -> None:
        """End the session: the registration vanishes at once (as a dead broker's does after its timeout)."""
        if self.zk is not None:
            self.zk.stop()
            self.zk.close()
            self.zk = None

    def close(self) -> None:
        self.unregister()
        self.server.stop(0)


class ControllerNode:
    """A Controller with its own session and registry view (one broker's controller role)."""

    def __init__(self, zk_connect: str, broker_id: int, *, unclean_default: bool = False,
                 rebalance: RebalancePolicy = RebalancePolicy(enabled=False)) -> None:
        self.zk = KazooClient(hosts=zk_connect, timeout=10)
        self.zk.start(timeout=10)
        self.registry = RegistryView(self.zk)
        self.registry.start()
        self.controller = Controller(self.zk, broker_id, self.registry, ReplicaControlClient(),
                                     unclean_default=unclean_default, request_timeout_s=2.0, rebalance=rebalance)

    def start(self) -> ControllerNode:
        self.controller.start()
        return self

    def close(self) -> None:
        self.controller.close()
        self.registry.close()
        self.zk.stop()
        self.zk.close()


def shutdown_server(handler: ShutdownHandler) -> tuple[grpc.Server, Any]:
    """A gRPC server whose ReplicaControl answers ControlledShutdown through ``handler``; (server, stub)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    rpb_grpc.add_ReplicaControlServicer_to_server(ReplicaControlServicer(RecordingApplier(), handler), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, rpb_grpc.ReplicaControlStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
