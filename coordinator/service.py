"""The GroupCoordinator gRPC servicer: a thin adapter over :class:`GroupCoordinator`.

Each call runs the coordinator's handler, persists the records it returns through
the offset store (durably: an acknowledged commit survives ``kill -9`` and power
loss), applies them, and answers. Calls about one group are serialized by that
group's lock, so records reach the log in the order they are applied; calls about
different groups run concurrently and share fsyncs (the store's group commit).

RegisterConsumer waits, after its records are persisted, for the rebalance it
started or joined to complete, up to the call's deadline.

In a cluster (a :class:`~rill.coordinator.routing.Router` given) every group RPC
about a group this broker does not coordinate answers NOT_COORDINATOR, checked under
the group's lock (so no call slips in while the group moves away); CreateGroup and
ListGroups may go to any broker (rill.coordinator.routing).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import grpc
import structlog

from rill.client.errors import StorageError
from rill.coordinator.group_coordinator import GroupCoordinator
from rill.coordinator.group_shards import NotCoordinator, Shard, Shards, SingleShard
from rill.coordinator.offsets_log import OffsetStore
from rill.coordinator.pending import PendingJoin
from rill.coordinator.records import Record
from rill.coordinator.routing import Peers, Router, forward_create, is_forwarded, list_groups
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import coordinator_pb2_grpc as pb_grpc

log = structlog.get_logger(__name__)

R = TypeVar("R")
DEFAULT_WAIT_S = 300.0  # a RegisterConsumer without a deadline waits at most this long


class RecordSink:
    """Persist-then-apply, the one path by which coordinator state changes.

    Records go to the shard of their group (rill.coordinator.group_shards): one batch per
    shard, each all or nothing. A batch that spans shards (DeleteGroup of several groups)
    is persisted shard by shard; when one fails, those persisted before it are applied
    and the error is raised.

    Raises:
        NotCoordinator: a group's shard is not served here (nothing of that shard was written).
        StorageError, TimeoutError: from the offset store.
    """

    def __init__(self, coordinator: GroupCoordinator, shards: Shards | OffsetStore) -> None:
        self.coordinator = coordinator
        self.shards: Shards = SingleShard(shards) if isinstance(shards, OffsetStore) else shards

    def __call__(self, records: Sequence[Record], timeout: float | None = None) -> None:
        if not records:
            return
        batches: dict[Shard, list[Record]] = {}
        for record in records:
            batches.setdefault(self.shards.shard_for(record.group), []).append(record)
        done: list[Record] = []
        try:
            for shard, batch in batches.items():
                shard.store.append(batch, timeout)
                done.extend(batch)
        finally:
            if done:
                self.coordinator.apply(done)
        for shard in batches:
            holds = shard.holds
            shard.store.maybe_compact(lambda: self.coordinator.snapshot_records(holds))


class GroupCoordinatorServicer(pb_grpc.GroupCoordinatorServicer):
    def __init__(self, coordinator: GroupCoordinator, sink: RecordSink, *, commit_timeout_s: float = 5.0,
                 router: Router | None = None) -> None:
        self.coordinator = coordinator
        self.sink = sink
        self.commit_timeout_s = commit_timeout_s
        self.locks = coordinator.group_locks
        self.router = router
        self.peers = Peers()

    def owns(self, *groups: str) -> bool:
        """Does this broker coordinate every one of ``groups`` (always, without a router)?"""
        return self.router is None or all(self.router.owns(g) for g in groups)

    def _handle(self, group: str | list[str], handler: Callable[[Any], tuple[R, list[Record]]], request: Any,
                context: grpc.ServicerContext, failed: Callable[[pb.ErrorCode], R]) -> R:
        return self.handle(group, handler, request, context.time_remaining(), failed)

    def handle(self, group: str | list[str], handler: Callable[[Any], tuple[R, list[Record]]], request: Any,
               remaining: float | None, failed: Callable[[pb.ErrorCode], R]) -> R:
        """Run ``handler`` under the group lock(s), persist and apply its records; its response.

        ``remaining`` is the call's time left (None: no deadline); the persist waits at most
        that long and ``commit_timeout_s``. Blocks (the lock, the fsync): the aio server runs
        it on a worker thread. Persist, apply and the store's compaction check stay on the
        calling thread, as the offset store requires.
        """
        names = [group] if isinstance(group, str) else group
        with self.locks.hold(*names):
            if not self.owns(*names):
                return failed(pb.NOT_COORDINATOR)
            response, records = handler(request)
            try:
                self.sink(records, self.commit_timeout_s if remaining is None else min(remaining, self.commit_timeout_s))
            except NotCoordinator as exc:
                log.info("coordinator.not_coordinator", group=group, reason=str(exc))
                return failed(pb.NOT_COORDINATOR)
            except (StorageError, TimeoutError) as exc:
                log.error("coordinator.persist_failed", group=group, error=str(exc))
                return failed(pb.STORAGE_ERROR)
        return response

    def register_pending(self, request: pb.RegisterConsumerRequest, remaining: float | None) -> PendingJoin:
        """The persist-then-apply part of RegisterConsumer: the PendingJoin to wait for."""
        def failed(code: pb.ErrorCode) -> PendingJoin:
            return PendingJoin.completed(pb.RegisterConsumerResponse(
                client_id=request.client_id, consumer_group=request.consumer_group, error_code=code))

        return self.handle(request.consumer_group, self.coordinator.register_consumer, request, remaining, failed)

    def CreateGroup(self, request: pb.CreateGroupRequest, context: grpc.ServicerContext) -> pb.CreateGroupResponse:
        router = self.router
        if router is not None and not router.owns(request.consumer_group):
            if is_forwarded(context):
                return pb.CreateGroupResponse(consumer_group=request.consumer_group, error_code=pb.NOT_COORDINATOR,
                                              coordinator=router.coordinator(request.consumer_group))
            return forward_create(router, self.peers, request, context.time_remaining())
        return self._handle(request.consumer_group, self.coordinator.create_group, request, context,
                            lambda code: pb.CreateGroupResponse(consumer_group=request.consumer_group, error_code=code))

    def DeleteGroup(self, request: pb.DeleteGroupRequest, context: grpc.ServicerContext) -> pb.DeleteGroupResponse:
        return self._handle(list(request.consumer_group), self.coordinator.delete_group, request, context,
                            lambda code: pb.DeleteGroupResponse(error_code=code, errors=[
                                pb.GroupError(consumer_group=g, error_code=code) for g in request.consumer_group]))

    def ListGroups(self, request: pb.ListGroupsRequest, context: grpc.ServicerContext) -> pb.ListGroupsResponse:
        if self.router is not None:
            return list_groups(self.router, self.peers, lambda req: self.coordinator.list_groups(req)[0], request,
                               is_forwarded(context), context.time_remaining())
        response, _ = self.coordinator.list_groups(request)
        return response

    def Heartbeat(self, request: pb.HeartbeatRequest, context: grpc.ServicerContext) -> pb.HeartbeatResponse:
        return self._handle(request.consumer_group, self.coordinator.heartbeat, request, context,
                            lambda code: pb.HeartbeatResponse(error_code=code))

    def CommitOffsets(self, request: pb.CommitOffsetsRequest, context: grpc.ServicerContext) -> pb.CommitOffsetsResponse:
        return self._handle(request.consumer_group, self.coordinator.commit_offsets, request, context,
                            lambda code: pb.CommitOffsetsResponse(error_code=code))

    def FetchOffsets(self, request: pb.FetchOffsetsRequest, context: grpc.ServicerContext) -> pb.FetchOffsetsResponse:
        if not self.owns(request.consumer_group):
            return pb.FetchOffsetsResponse(error_code=pb.NOT_COORDINATOR)
        response, _ = self.coordinator.fetch_offsets(request)
        return response

    def LeaveGroup(self, request: pb.LeaveGroupRequest, context: grpc.ServicerContext) -> pb.LeaveGroupResponse:
        def leave(req: pb.LeaveGroupRequest) -> tuple[pb.LeaveGroupResponse, list[Record]]:
            code, records = self.coordinator.leave_group(req.consumer_group, req.consumer_id)
            return pb.LeaveGroupResponse(error_code=code), records

        return self._handle(request.consumer_group, leave, request, context,
                            lambda code: pb.LeaveGroupResponse(error_code=code))

    def RewindConsumer(self, request: pb.RewindConsumerRequest,
                       context: grpc.ServicerContext) -> pb.RewindConsumerResponse:
        if request.dry_run:  # resolve and validate only: the records are dropped, nothing is applied
            with self.locks.hold(request.consumer_group):
                if not self.owns(request.consumer_group):
                    return pb.RewindConsumerResponse(consumer_group=request.consumer_group,
                                                     error_code=pb.NOT_COORDINATOR)
                response, _ = self.coordinator.rewind_consumer(request)
            return response
        return self._handle(request.consumer_group, self.coordinator.rewind_consumer, request, context,
                            lambda code: pb.RewindConsumerResponse(consumer_group=request.consumer_group,
                                                                   error_code=code))

    def RegisterConsumer(self, request: pb.RegisterConsumerRequest,
                         context: grpc.ServicerContext) -> pb.RegisterConsumerResponse:
        pending = self.register_pending(request, context.time_remaining())
        remaining = context.time_remaining()
        response = pending.wait(DEFAULT_WAIT_S if remaining is None else remaining)
        if response is None:
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "the rebalance did not complete before the deadline")
            raise RuntimeError("context.abort returned")  # it raises; this keeps the type checker informed
        return response
