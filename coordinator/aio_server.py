"""The broker's gRPC services on a grpc.aio server: its own thread, its own event loop.

The alternative to :mod:`rill.coordinator.grpc_server` (a sync server whose
ThreadPoolExecutor gives every call a thread, a RegisterConsumer included for as long
as its rebalance takes). Chosen with the broker key ``grpc.server = "aio"``. The
same :class:`~rill.coordinator.group_coordinator.GroupCoordinator` and
:class:`~rill.coordinator.service.RecordSink` answer; only the scheduling differs:

- ListGroups and FetchOffsets read in-memory state: they run on the event loop (in a
  cluster ListGroups may ask other brokers and ZooKeeper: it runs on a worker thread).
- Heartbeat has no records to persist: it runs on the loop when its group's lock is
  free, else on a worker thread (the lock may be held across another call's fsync).
- Calls that persist records (CreateGroup, DeleteGroup, CommitOffsets, RewindConsumer,
  LeaveGroup, and RegisterConsumer's first part) run the sync servicer's own method on
  a worker thread of a thread pool: the group lock is held across the fsync, and the
  offset store wants a batch's append, apply and compaction check on one thread.
  Concurrent calls share fsyncs as they do with the sync server.
- RegisterConsumer then waits for its rebalance **without a thread**: the PendingJoin's
  done-callback resolves an asyncio future through ``loop.call_soon_threadsafe``; past
  the call's deadline (300 s without one) the call ends with DEADLINE_EXCEEDED.
- The Admin service runs every call on a worker thread (DescribeGroup reads indexes).

Health checking (grpc.health.v1) and server reflection are on, as with the sync server;
slow and failed calls are logged the same way, and calls are authenticated and authorized
the same way (rill.coordinator.grpc_auth's AioAuthInterceptor, on the loop). ``AioServer.start()`` returns the bound
port (RuntimeError if it cannot bind); ``stop(grace)`` reports NOT_SERVING, lets
calls in flight finish for ``grace`` seconds, then ends the loop and its thread.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from typing import Any, TypeVar, cast

import grpc
import grpc.aio
import structlog
from grpc_health.v1 import health, health_pb2

from rill.coordinator.grpc_auth import AioAuthInterceptor, ServerSecurity
from rill.coordinator.grpc_call_metrics import GrpcCallMetrics
from rill.coordinator.grpc_server import (Registration, add_services, bind_ports, logged_call, server_options,
                                         service_registrations)
from rill.coordinator.pending import PendingJoin
from rill.coordinator.service import DEFAULT_WAIT_S, GroupCoordinatorServicer
from rill.v1 import admin_pb2 as apb
from rill.v1 import admin_pb2_grpc as apb_grpc
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import coordinator_pb2_grpc as pb_grpc

log = structlog.get_logger(__name__)

R = TypeVar("R")


class CallDeadline:
    """What the sync servicers use of a ServicerContext, for a call they answer on a worker thread.

    ``time_remaining()`` counts down from the aio call's remaining time when it was taken;
    ``invocation_metadata()`` is the call's metadata; ``abort`` raises (the sync servicers
    only abort in RegisterConsumer, which the aio servicer answers itself).
    """

    def __init__(self, remaining: float | None, metadata: Sequence[tuple[str, Any]] = ()) -> None:
        self._deadline = None if remaining is None else time.monotonic() + remaining
        self._metadata = tuple(metadata)

    def invocation_metadata(self) -> tuple[tuple[str, Any], ...]:
        return self._metadata

    def time_remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - time.monotonic())

    def abort(self, code: Any, details: str) -> None:
        raise RuntimeError(f"abort({code}, {details!r}) on a worker thread of the aio server")


class Offloader:
    """Runs blocking calls on the server's worker threads, with the caller's contextvars (log binding)."""

    def __init__(self, executor: futures.Executor) -> None:
        self.executor = executor

    async def __call__(self, fn: Callable[..., R], *args: Any) -> R:
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()
        return await loop.run_in_executor(self.executor, functools.partial(context.run, fn, *args))


class AioGroupCoordinatorServicer(pb_grpc.GroupCoordinatorServicer):
    """The GroupCoordinator service for grpc.aio, over the sync servicer's persist-then-apply path."""

    def __init__(self, sync: GroupCoordinatorServicer, executor: futures.Executor) -> None:
        self.sync = sync
        self.offload = Offloader(executor)

    async def _on_worker(self, method: Callable[[Any, Any], R], request: Any, context: Any) -> R:
        deadline = CallDeadline(context.time_remaining(), context.invocation_metadata() or ())
        return await self.offload(method, request, deadline)

    async def CreateGroup(self, request: pb.CreateGroupRequest, context: Any) -> pb.CreateGroupResponse:
        return await self._on_worker(self.sync.CreateGroup, request, context)

    async def DeleteGroup(self, request: pb.DeleteGroupRequest, context: Any) -> pb.DeleteGroupResponse:
        return await self._on_worker(self.sync.DeleteGroup, request, context)

    async def ListGroups(self, request: pb.ListGroupsRequest, context: Any) -> pb.ListGroupsResponse:
        if self.sync.router is not None:  # may call other brokers and ZooKeeper
            return await self._on_worker(self.sync.ListGroups, request, context)
        return self.sync.ListGroups(request, CallDeadline(None))

    async def FetchOffsets(self, request: pb.FetchOffsetsRequest, context: Any) -> pb.FetchOffsetsResponse:
        return self.sync.FetchOffsets(request, CallDeadline(None))

    async def Heartbeat(self, request: pb.HeartbeatRequest, context: Any) -> pb.HeartbeatResponse:
        with self.sync.locks.try_hold(request.consumer_group) as held:
            if held:  # no records to persist: answered here, without a thread switch
                return self.sync.Heartbeat(request, CallDeadline(None))
        return await self._on_worker(self.sync.Heartbeat, request, context)

    async def CommitOffsets(self, request: pb.CommitOffsetsRequest, context: Any) -> pb.CommitOffsetsResponse:
        return await self._on_worker(self.sync.CommitOffsets, request, context)

    async def RewindConsumer(self, request: pb.RewindConsumerRequest, context: Any) -> pb.RewindConsumerResponse:
        return await self._on_worker(self.sync.RewindConsumer, request, context)

    async def LeaveGroup(self, request: pb.LeaveGroupRequest, context: Any) -> pb.LeaveGroupResponse:
        return await self._on_worker(self.sync.LeaveGroup, request, context)

    async def RegisterConsumer(self, request: pb.RegisterConsumerRequest,
                               context: Any) -> pb.RegisterConsumerResponse:
        started = time.monotonic()
        remaining = context.time_remaining()
        pending = await self.offload(self.sync.register_pending, request, remaining)
        wait = DEFAULT_WAIT_S if remaining is None else remaining - (time.monotonic() - started)
        response = await wait_for_join(pending, wait)
        if response is None:
            try:
                await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                                    "the rebalance did not complete before the deadline")
            except grpc.aio.AbortError:
                raise
            except Exception as exc:  # the call already ended at the client's deadline: nobody to tell
                log.debug("coordinator.abort_after_deadline", error=repr(exc))
                raise grpc.aio.AbortError("the call ended at its deadline") from exc
            raise RuntimeError("context.abort returned")  # it raises; this keeps the type checker informed
        return response


async def wait_for_join(pending: PendingJoin, timeout: float) -> pb.RegisterConsumerResponse | None:
    """The PendingJoin's response, awaited on the running loop; None if not done within ``timeout`` s."""
    done = pending.response()
    if done is not None:
        return done
    loop = asyncio.get_running_loop()
    future: asyncio.Future[pb.RegisterConsumerResponse] = loop.create_future()

    def resolve(response: pb.RegisterConsumerResponse) -> None:  # on the loop
        if not future.done():
            future.set_result(response)

    def completed(response: pb.RegisterConsumerResponse) -> None:  # on the completing thread: do not block
        try:
            loop.call_soon_threadsafe(resolve, response)
        except RuntimeError:  # the loop is closed: the server stopped, nobody waits any more
            pass

    pending.add_done_callback(completed)
    try:
        return await asyncio.wait_for(future, max(0.0, timeout))
    except asyncio.TimeoutError:
        return None


class AioAdminServicer(apb_grpc.AdminServicer):
    """The Admin service for grpc.aio: each call runs the sync servicer's method on a worker thread."""

    def __init__(self, sync: Any, executor: futures.Executor) -> None:
        self.sync = sync
        self.offload = Offloader(executor)

    async def _on_worker(self, name: str, request: Any, context: Any) -> Any:
        return await self.offload(getattr(self.sync, name), request, CallDeadline(context.time_remaining()))

    async def CreateTopic(self, request: apb.CreateTopicRequest, context: Any) -> apb.CreateTopicResponse:
        return cast(apb.CreateTopicResponse, await self._on_worker("CreateTopic", request, context))

    async def ListTopics(self, request: apb.ListTopicsRequest, context: Any) -> apb.ListTopicsResponse:
        return cast(apb.ListTopicsResponse, await self._on_worker("ListTopics", request, context))

    async def DescribeTopics(self, request: apb.DescribeTopicsRequest, context: Any) -> apb.DescribeTopicsResponse:
        return cast(apb.DescribeTopicsResponse, await self._on_worker("DescribeTopics", request, context))

    async def DescribeCluster(self, request: apb.DescribeClusterRequest,
                              context: Any) -> apb.DescribeClusterResponse:
        return cast(apb.DescribeClusterResponse, await self._on_worker("DescribeCluster", request, context))

    async def DescribeGroup(self, request: apb.DescribeGroupRequest, context: Any) -> apb.DescribeGroupResponse:
        return cast(apb.DescribeGroupResponse, await self._on_worker("DescribeGroup", request, context))

    async def ElectLeaders(self, request: apb.ElectLeadersRequest, context: Any) -> apb.ElectLeadersResponse:
        return cast(apb.ElectLeadersResponse, await self._on_worker("ElectLeaders", request, context))

    async def AlterTopicConfig(self, request: apb.AlterTopicConfigRequest,
                               context: Any) -> apb.AlterTopicConfigResponse:
        return cast(apb.AlterTopicConfigResponse, await self._on_worker("AlterTopicConfig", request, context))

    async def AlterPartitionReassignments(self, request: apb.AlterPartitionReassignmentsRequest,
                                          context: Any) -> apb.AlterPartitionReassignmentsResponse:
        return cast(apb.AlterPartitionReassignmentsResponse,
                    await self._on_worker("AlterPartitionReassignments", request, context))

    async def ListPartitionReassignments(self, request: apb.ListPartitionReassignmentsRequest,
                                         context: Any) -> apb.ListPartitionReassignmentsResponse:
        return cast(apb.ListPartitionReassignmentsResponse,
                    await self._on_worker("ListPartitionReassignments", request, context))

    async def AlterReplicationThrottle(self, request: apb.AlterReplicationThrottleRequest,
                                       context: Any) -> apb.AlterReplicationThrottleResponse:
        return cast(apb.AlterReplicationThrottleResponse,
                    await self._on_worker("AlterReplicationThrottle", request, context))

    async def DeleteTopic(self, request: apb.DeleteTopicRequest, context: Any) -> apb.DeleteTopicResponse:
        return cast(apb.DeleteTopicResponse, await self._on_worker("DeleteTopic", request, context))

    async def CreatePartitions(self, request: apb.CreatePartitionsRequest,
                               context: Any) -> apb.CreatePartitionsResponse:
        return cast(apb.CreatePartitionsResponse, await self._on_worker("CreatePartitions", request, context))


class AioLoggingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Binds rpc and request id to structlog's context for the call, logs slow or failed calls.

    Each call runs in its own asyncio task, so the binding is the call's own; the
    Offloader carries it to the worker thread. The wrapped handler of a method is built
    once (the request id comes from the call's own metadata), not per call.
    """

    def __init__(self, slow_ms: float = 1000.0, metrics: GrpcCallMetrics | None = None) -> None:
        self.slow_ms = slow_ms
        self.metrics = metrics
        self._wrapped: dict[str, Any] = {}

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        method = details.method
        wrapped = self._wrapped.get(method)
        if wrapped is not None:
            return wrapped
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        inner = handler.unary_unary
        slow_ms, metrics = self.slow_ms, self.metrics

        async def wrapper(request: Any, context: Any) -> Any:
            request_id = next((v for k, v in context.invocation_metadata() or () if k == "x-request-id"), None)
            started = time.monotonic()
            code = "UNKNOWN"
            with logged_call(method, request_id, slow_ms, expected=(grpc.aio.AbortError,)):
                try:
                    response = await inner(request, context)
                    code = "OK"
                    return response
                finally:
                    if metrics is not None:
                        status = context.code()  # set by an abort, or by a handler without raising
                        metrics.observe(method, status.name if isinstance(status, grpc.StatusCode) else code,
                                        time.monotonic() - started)

        wrapped = self._wrapped[method] = grpc.unary_unary_rpc_method_handler(
            wrapper, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)
        return wrapped


class AioServer:
    """A grpc.aio server serving ``registrations`` (aio servicers) from its own thread and event loop."""

    def __init__(self, address: str | None, registrations: Sequence[Registration], *,
                 executor: futures.ThreadPoolExecutor, max_message_bytes: int = 16 * 1024 * 1024,
                 security: ServerSecurity | None = None) -> None:
        self.address = address
        self.security = security
        self.metrics: GrpcCallMetrics | None = None  # calls counted by the logging interceptor
        self.registrations = list(registrations)
        self.executor = executor
        self.max_message_bytes = max_message_bytes
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._server: Any = None
        self._health: Any = None

    def start(self, timeout: float = 30.0) -> int:
        """Start the loop thread and the server on it; returns the bound port.

        Raises:
            RuntimeError: the address cannot be bound, or the server did not start in ``timeout`` s.
        """
        self._thread = threading.Thread(target=self._run, name="rill-grpc-aio", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError(f"the gRPC (aio) server on {self.address} did not start in {timeout} s")
        if self._error is not None:
            self._thread.join(timeout)
            self._thread = None
            self.executor.shutdown(wait=False)
            if isinstance(self._error, RuntimeError):
                raise self._error
            raise RuntimeError(f"cannot start the gRPC (aio) server on {self.address}: {self._error}") from self._error
        return self.port

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._start())
        except BaseException as exc:  # handed to start()
            self._error = exc
            loop.close()
            self._ready.set()
            return
        self._loop = loop
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _start(self) -> None:
        interceptors: list[Any] = [AioLoggingInterceptor(metrics=self.metrics)]
        if self.security is not None:
            interceptors.append(AioAuthInterceptor(self.security))
        server = grpc.aio.server(interceptors=interceptors, options=server_options(self.max_message_bytes))
        health_servicer = health.aio.HealthServicer()
        for name in add_services(server, self.registrations, health_servicer):
            await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
        try:
            port = bind_ports(server, self.address, self.security)
        except RuntimeError as exc:
            await server.stop(None)
            raise RuntimeError(f"cannot bind the gRPC server ({self.address}): {exc}") from exc
        await server.start()
        self._server, self._health, self.port = server, health_servicer, port

    async def _stop(self, grace: float) -> None:
        await self._health.enter_graceful_shutdown()
        await self._server.stop(grace)

    def stop(self, grace: float = 5.0) -> None:
        """Report NOT_SERVING, stop taking calls, let running ones finish within ``grace`` s; end the thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._loop = self._thread = None
        try:
            asyncio.run_coroutine_threadsafe(self._stop(grace), loop).result(timeout=grace + 10)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=grace + 10)
            self.executor.shutdown(wait=True)


def create_server(address: str | None, coordinator: GroupCoordinatorServicer, admin: Any, *, max_workers: int = 256,
                  max_message_bytes: int = 16 * 1024 * 1024,
                  security: ServerSecurity | None = None,
                  metrics: GrpcCallMetrics | None = None) -> tuple[AioServer, int]:
    """Build and start an aio server with the GroupCoordinator and Admin services; (server, bound port).

    ``max_workers`` bounds the threads that run handlers and fsyncs (started as needed);
    a RegisterConsumer waiting for its rebalance holds none.
    """
    executor = futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="rill-grpc-aio-worker")
    server = AioServer(address, service_registrations(AioGroupCoordinatorServicer(coordinator, executor),
                                                      AioAdminServicer(admin, executor)),
                       executor=executor, max_message_bytes=max_message_bytes, security=security)
    server.metrics = metrics
    return server, server.start()
