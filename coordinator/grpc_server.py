"""The broker's gRPC server: services, health checking, reflection, request logging.

``create_server(address, servicers, max_workers)`` returns ``(server, port)`` with
every given servicer registered, grpc.health.v1 reporting SERVING for each, and
server reflection on (so ``grpcurl`` works without the .proto files). The port is
bound with SO_REUSEPORT off: a port already in use is an error, not a silent
second listener. ``stop(server, health, grace)`` marks everything NOT_SERVING and
lets in-flight calls finish for ``grace`` seconds.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from rill.coordinator.grpc_auth import AuthInterceptor, ServerSecurity
from rill.coordinator.grpc_call_metrics import GrpcCallMetrics
from rill.v1 import admin_pb2, admin_pb2_grpc
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import coordinator_pb2_grpc as pb_grpc

log = structlog.get_logger(__name__)


class AbortedCall(Exception):
    """Raised through the interceptor after ``context.abort``: the status is already set."""


@dataclass(frozen=True)
class Registration:
    """A servicer, the generated function that adds it, and its full service name."""

    servicer: Any
    add: Callable[[Any, grpc.Server], None]
    service_name: str


def service_registrations(coordinator: Any, admin: Any) -> list[Registration]:
    """The broker's two services, GroupCoordinator and Admin, for the given (sync or aio) servicers."""
    return [
        Registration(coordinator, pb_grpc.add_GroupCoordinatorServicer_to_server,
                     pb.DESCRIPTOR.services_by_name["GroupCoordinator"].full_name),
        Registration(admin, admin_pb2_grpc.add_AdminServicer_to_server,
                     admin_pb2.DESCRIPTOR.services_by_name["Admin"].full_name),
    ]


def server_options(max_bytes: int) -> list[tuple[str, int]]:
    """SO_REUSEPORT off (a port in use is an error, not a second listener) and the message size limits."""
    return [("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", max_bytes),
            ("grpc.max_send_message_length", max_bytes)]


def add_services(server: Any, registrations: Sequence[Registration], health_servicer: Any) -> list[str]:
    """Register ``registrations`` and the health servicer on ``server`` and turn reflection on.

    Returns the names the health servicer should report SERVING (every service, and "");
    the caller sets them (the aio health servicer's ``set`` is a coroutine).
    """
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = []
    for reg in registrations:
        reg.add(reg.servicer, server)
        names.append(reg.service_name)
    reflection.enable_server_reflection((*names, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    return [*names, ""]


@contextmanager
def logged_call(method: str, request_id: str | None, slow_ms: float,
                expected: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Bind ``rpc`` and ``request_id`` to structlog's context for one call; log it if it fails or is slow.

    ``expected`` exceptions (a deliberate abort, such as a RegisterConsumer that hit its
    deadline) pass through without a traceback in the log.
    """
    structlog.contextvars.bind_contextvars(rpc=method, request_id=request_id or uuid.uuid4().hex[:12])
    started = time.monotonic()
    try:
        yield
    except expected:
        raise
    except Exception as exc:
        log.exception("rpc.failed", error=repr(exc))
        raise
    finally:
        elapsed_ms = (time.monotonic() - started) * 1000
        if elapsed_ms >= slow_ms:
            log.info("rpc.slow", ms=round(elapsed_ms, 1))
        structlog.contextvars.clear_contextvars()


class LoggingInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
    """Binds rpc and request id to structlog's context for the handler, logs slow or failed calls.

    Binding happens in the wrapped handler, which runs on the worker thread (the
    interceptor itself runs on gRPC's polling thread).
    """

    def __init__(self, slow_ms: float = 1000.0, metrics: GrpcCallMetrics | None = None) -> None:
        self.slow_ms = slow_ms
        self.metrics = metrics

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        handler = continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        inner, method = handler.unary_unary, details.method
        metadata = dict(details.invocation_metadata or ())
        slow_ms, metrics = self.slow_ms, self.metrics

        def wrapper(request: Any, context: grpc.ServicerContext) -> Any:
            started = time.monotonic()
            code = "OK"
            with logged_call(method, metadata.get("x-request-id"), slow_ms, expected=(AbortedCall,)):
                try:
                    response = inner(request, context)
                    set_code = context.code()  # a handler may set a status without raising
                    code = set_code.name if set_code is not None else "OK"
                    return response
                except Exception:
                    aborted = context.code()
                    code = aborted.name if aborted is not None else "UNKNOWN"
                    if aborted is not None:  # the handler aborted the call on purpose
                        raise AbortedCall() from None
                    raise
                finally:
                    if metrics is not None:
                        metrics.observe(method, code, time.monotonic() - started)

        return grpc.unary_unary_rpc_method_handler(
            wrapper, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)


def create_server(address: str | None, registrations: Sequence[Registration], *, max_workers: int = 256,
                  max_message_bytes: int = 16 * 1024 * 1024, security: ServerSecurity | None = None,
                  metrics: GrpcCallMetrics | None = None) -> tuple[grpc.Server, int, health.HealthServicer]:
    """Build and start a server on ``address`` ("host:port", port 0 for any free one; no plaintext
    port when ``address`` is None) and, with ``security``, on its TLS address too, every call to rill's
    services authenticated and, with ``security.authorize``, authorized (rill.coordinator.grpc_auth).

    Returns (server, bound plaintext port (-1: none), health servicer); ``security.tls_port``
    is set to the bound TLS port. Raises RuntimeError if a port is taken.
    """
    interceptors: list[Any] = [LoggingInterceptor(metrics=metrics)]
    if security is not None:
        interceptors.append(AuthInterceptor(security))
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="rill-grpc"),
        interceptors=interceptors,
        options=server_options(max_message_bytes),
    )
    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    for name in add_services(server, registrations, health_servicer):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    port = bind_ports(server, address, security)
    server.start()
    return server, port, health_servicer


def bind_ports(server: Any, address: str | None, security: ServerSecurity | None) -> int:
    """Add the plaintext port (unless ``address`` is None) and the TLS one; the plaintext port (-1: none).

    Raises:
        RuntimeError: a port cannot be bound.
    """
    port = -1
    if address is not None:
        port = server.add_insecure_port(address)
        if port == 0:
            raise RuntimeError(f"cannot bind the gRPC server to {address}")
    if security is not None and security.tls_address is not None:
        security.tls_port = server.add_secure_port(security.tls_address, security.credentials)
        if security.tls_port == 0:
            raise RuntimeError(f"cannot bind the gRPC server's TLS port to {security.tls_address}")
    return port


def stop(server: grpc.Server, health_servicer: health.HealthServicer, grace: float = 5.0) -> None:
    """Report NOT_SERVING, stop taking calls, and let running ones finish within ``grace`` seconds."""
    health_servicer.enter_graceful_shutdown()
    server.stop(grace).wait()
