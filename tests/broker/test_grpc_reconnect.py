"""A gRPC service that comes back is reached within about a second (client/grpc_channels.py).

gRPC's default: every channel of a process to one address shares a subchannel whose
reconnect backoff grows up to 120 s, so even a channel opened after the server returned
waited out the old backoff (the controller reached a restarted broker only after up to
two minutes). Measured here with a real gRPC server on loopback that is down long
enough for the default backoff to pass 5 s.
"""

from __future__ import annotations

import socket
import time
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from rill.client.grpc_channels import insecure_channel


def serve(port: int) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(2))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server


def check(channel: grpc.Channel) -> None:
    health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=0.5)  # type: ignore[no-untyped-call]


def seconds_to_reach(channel: grpc.Channel, limit: float, why: str) -> float:
    """How long until a call through ``channel`` succeeds (asserting, with ``why``, that it is under ``limit`` s)."""
    began = time.monotonic()
    while True:
        try:
            check(channel)
            return time.monotonic() - began
        except grpc.RpcError:
            assert time.monotonic() - began < limit, why
            time.sleep(0.1)


@pytest.mark.slow
def test_a_fresh_channel_reaches_a_returned_server_at_once_despite_an_old_channels_backoff() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"127.0.0.1:{port}"
    old = insecure_channel(address)  # another user of the address in this process, kept open
    server = serve(port)
    check(old)
    server.stop(0)
    failing_until = time.monotonic() + 20  # long enough for gRPC's default backoff to grow past 5 s
    while time.monotonic() < failing_until:
        with pytest.raises(grpc.RpcError):
            check(old)
        time.sleep(0.3)
    server = serve(port)
    try:
        fresh = insecure_channel(address)
        reached_fresh = seconds_to_reach(fresh, 5, "a fresh channel still waited out the old backoff")
        seconds_to_reach(old, 5, "the old channel's backoff grew past 1 s")  # it retries at most 1 s apart
        assert reached_fresh < 2.5
        fresh.close()
    finally:
        old.close()
        server.stop(0)
