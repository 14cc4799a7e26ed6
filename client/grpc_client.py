"""The client of the broker's gRPC services (group coordination and administration): ``AdminClient``.

``AdminClient("localhost:9093")`` wraps the generated stubs with a deadline on every
call (gRPC's default is none) and turns failed calls into exceptions (:func:`call_error`):

- refused by the broker's ACLs (PERMISSION_DENIED, with the ``rill-error`` trailer):
  :class:`~rill.client.errors.TopicAuthorizationFailed`,
  :class:`~rill.client.errors.GroupAuthorizationFailed` or
  :class:`~rill.client.errors.ClusterAuthorizationFailed`, whose message says what was
  refused (``User:bob may not Delete Group:g1``);
- wrong credentials (UNAUTHENTICATED): :class:`~rill.client.errors.AuthenticationFailed`;
- any other failure (unreachable, deadline): :class:`~rill.client.errors.ConnectionClosed`.

Domain errors are not raised: they come back as ``error_code`` fields in the responses
(rill.v1.ErrorCode), as seed 003 defines them; :func:`error_name` gives their names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, cast

import grpc

from rill.client.errors import (AuthenticationFailed, AuthorizationFailed, ClusterAuthorizationFailed, ConnectionClosed,
                                GroupAuthorizationFailed, RillError, TopicAuthorizationFailed)
from rill.v1 import admin_pb2 as apb
from rill.v1 import admin_pb2_grpc as apb_grpc
from rill.v1 import coordinator_pb2 as pb
from rill.v1 import coordinator_pb2_grpc as pb_grpc
from rill.client.grpc_channels import ERROR_TRAILER, open_channel
from rill.client.security.client_security import ClientSecurity

DEFAULT_TIMEOUT = 30.0

REFUSALS: tuple[type[RillError], ...] = (AuthorizationFailed, AuthenticationFailed)
"""What a refused call raises (the ACLs, or the credentials): asking again the same way fails the same way."""

_REFUSED_AS: dict[str, type[AuthorizationFailed]] = {
    cls.code.name: cls for cls in (TopicAuthorizationFailed, GroupAuthorizationFailed, ClusterAuthorizationFailed)}


def call_error(exc: grpc.RpcError, address: str) -> RillError:
    """The exception for a gRPC call to ``address`` that failed with ``exc`` (see the module docstring);
    a PERMISSION_DENIED without a known ``rill-error`` trailer is a ConnectionClosed."""
    code = exc.code() if hasattr(exc, "code") else None
    detail = exc.details() if hasattr(exc, "details") else str(exc)
    if code is grpc.StatusCode.PERMISSION_DENIED:
        trailers = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
        refused = _REFUSED_AS.get(next((str(v) for k, v in trailers or () if k == ERROR_TRAILER), ""))
        if refused is not None:
            return refused(detail or refused.meaning)
    message = f"gRPC call to {address} failed: {code.name if code else 'error'}: {detail}"
    if code is grpc.StatusCode.UNAUTHENTICATED:
        return AuthenticationFailed(message)
    return ConnectionClosed(message)


def error_name(code: int) -> str:
    try:
        return str(pb.ErrorCode.Name(code))
    except ValueError:
        return f"error {code}"


class AdminClient:
    """Calls the GroupCoordinator and Admin services of one broker. Thread-safe."""

    def __init__(self, address: str, timeout: float = DEFAULT_TIMEOUT, client_id: str = "rill-admin",
                 security: ClientSecurity | None = None) -> None:
        self.address = address
        self.timeout = timeout
        self.client_id = client_id
        self.security = security
        self.channel = open_channel(address, security)
        self.groups = pb_grpc.GroupCoordinatorStub(self.channel)  # type: ignore[no-untyped-call]
        self.admin = apb_grpc.AdminStub(self.channel)  # type: ignore[no-untyped-call]

    def _call(self, method: Any, request: Any, timeout: float | None = None) -> Any:
        """``method(request)`` within the deadline; raises as :func:`call_error` says."""
        try:
            return method(request, timeout=self.timeout if timeout is None else timeout)
        except grpc.RpcError as exc:
            raise call_error(exc, self.address) from exc

    def _at(self, broker: pb.Broker) -> AdminClient:
        """A client of ``broker`` (a controller named by NOT_CONTROLLER) with this one's settings: a broker
        answering a call that came in over TLS names the controller's TLS gRPC port."""
        return AdminClient(f"{broker.host}:{broker.grpc_port}", self.timeout, self.client_id, security=self.security)

    # ---------------------------------------------------------------- groups

    def list_groups(self, names: Sequence[str] = ()) -> pb.ListGroupsResponse:
        return cast(pb.ListGroupsResponse, self._call(self.groups.ListGroups, pb.ListGroupsRequest(client_id=self.client_id,
                                                                      consumer_groups=list(names))))

    def create_group(self, group: str, topics: Iterable[str] = (), *, session_timeout_ms: int = 10_000,
                     strategy: str = "range", ephemeral: bool = False,
                     rebalance_timeout_ms: int = 0) -> pb.CreateGroupResponse:
        return cast(pb.CreateGroupResponse, self._call(self.groups.CreateGroup, pb.CreateGroupRequest(
            client_id=self.client_id, consumer_group=group, session_timeout=session_timeout_ms,
            topics=list(topics), assignment_strategy=strategy, ephemeral=ephemeral,
            rebalance_timeout=rebalance_timeout_ms)))

    def delete_groups(self, groups: Sequence[str]) -> pb.DeleteGroupResponse:
        return cast(pb.DeleteGroupResponse, self._call(self.groups.DeleteGroup, pb.DeleteGroupRequest(client_id=self.client_id,
                                                                         consumer_group=list(groups))))

    def describe_group(self, group: str) -> apb.DescribeGroupResponse:
        return cast(apb.DescribeGroupResponse, self._call(self.admin.DescribeGroup, apb.DescribeGroupRequest(consumer_group=group)))

    def rewind(self, group: str, offsets: Sequence[tuple[str, int, int]], *, target: pb.RewindTarget = pb.OFFSET,
               timestamp_ms: int = 0, dry_run: bool = False) -> pb.RewindConsumerResponse:
        return cast(pb.RewindConsumerResponse, self._call(self.groups.RewindConsumer, pb.RewindConsumerRequest(
            client_id=self.client_id, consumer_group=group,
            new_offsets=[pb.PartitionOffset(topic=t, partition=p, offset=o) for t, p, o in offsets],
            target=target, timestamp=timestamp_ms, dry_run=dry_run)))

    def commit(self, group: str, offsets: Sequence[tuple[str, int, int]], *, consumer_id: str = "",
               generation: int = 0) -> pb.CommitOffsetsResponse:
        return cast(pb.CommitOffsetsResponse, self._call(self.groups.CommitOffsets, pb.CommitOffsetsRequest(
            client_id=self.client_id, consumer_group=group, consumer_id=consumer_id, generation=generation,
            offsets=[pb.PartitionOffset(topic=t, partition=p, offset=o) for t, p, o in offsets])))

    def leave_group(self, group: str, consumer_id: str) -> pb.LeaveGroupResponse:
        return cast(pb.LeaveGroupResponse, self._call(self.groups.LeaveGroup, pb.LeaveGroupRequest(
            client_id=self.client_id, consumer_group=group, consumer_id=consumer_id)))

    def fetch_offsets(self, group: str, partitions: Sequence[tuple[str, int]] = ()) -> pb.FetchOffsetsResponse:
        return cast(pb.FetchOffsetsResponse, self._call(self.groups.FetchOffsets, pb.FetchOffsetsRequest(
            client_id=self.client_id, consumer_group=group,
            partitions=[pb.TopicPartition(topic=t, partition=p) for t, p in partitions])))

    def register_consumer_future(self, group: str, consumer_id: str, topics: Sequence[str],
                                 static_partitions: Sequence[tuple[str, int]], session_timeout_ms: int,
                                 timeout: float) -> grpc.Future:
        """RegisterConsumer without blocking: a grpc.Future of the RegisterConsumerResponse.

        The call answers only when the group's rebalance completes, so a single-threaded
        caller polls ``future.done()`` (or adds a done-callback) instead of waiting.
        ``future.result()`` raises grpc.RpcError when the call itself failed.
        """
        request = pb.RegisterConsumerRequest(
            client_id=self.client_id, consumer_group=group, consumer_id=consumer_id, topics=list(topics),
            static_partitions=[pb.TopicPartition(topic=t, partition=p) for t, p in static_partitions],
            session_timeout=session_timeout_ms)
        return self.groups.RegisterConsumer.future(request, timeout=timeout)

    def heartbeat_future(self, group: str, consumer_id: str, generation: int, timeout: float) -> grpc.Future:
        """Heartbeat without blocking: a grpc.Future of the HeartbeatResponse (see register_consumer_future).

        It carries no session timeout: a member's is set when it registers."""
        request = pb.HeartbeatRequest(client_id=self.client_id, consumer_group=group, consumer_id=consumer_id,
                                      generation=generation)
        return self.groups.Heartbeat.future(request, timeout=timeout)

    # ---------------------------------------------------------------- topics and cluster

    def create_topic(self, topic: str, partitions: int, replication_factor: int = 0,
                     config: Mapping[str, str] | None = None) -> apb.CreateTopicResponse:
        """CreateTopic. ``replication_factor`` 0: the broker's ``default.replication.factor``; 1: a Kafka
        0.7-style topic on this broker; > 1: a replicated topic over the cluster's live brokers, with
        ``config`` as its settings (``min.insync.replicas``, ``unclean.leader.election.enable``).

        Errors come back in ``error_code`` (e.g. INVALID_REPLICATION_FACTOR, TOPIC_ALREADY_EXISTS).
        """
        request = apb.CreateTopicRequest(topic=topic, partitions=partitions, replication_factor=replication_factor,
                                         config=dict(config or {}))
        return cast(apb.CreateTopicResponse, self._call(self.admin.CreateTopic, request))

    def alter_topic_config(self, topic: str, set_config: Mapping[str, str] | None = None,
                           delete_config: Sequence[str] = ()) -> apb.AlterTopicConfigResponse:
        """AlterTopicConfig: set and delete settings of the replicated ``topic``, keeping the others.

        Any broker of the cluster may be asked; the brokers apply the change shortly after
        (the controller sends it). ``previous`` and ``config`` are the settings before and
        after; errors come back in ``error_code`` (INVALID_CONFIG, UNKNOWN_TOPIC_OR_PARTITION ...).
        """
        request = apb.AlterTopicConfigRequest(topic=topic, set_config=dict(set_config or {}),
                                              delete_config=list(delete_config))
        return cast(apb.AlterTopicConfigResponse, self._call(self.admin.AlterTopicConfig, request))

    def describe_topics(self, topics: Sequence[str] = (), *,
                        under_replicated_only: bool = False) -> apb.DescribeTopicsResponse:
        """DescribeTopics: every topic (or those named), each partition with its offsets, leader and, when
        replicated, ``replicas``, ``isr``, ``leader_epoch`` and ``under_replicated`` (and the topic's ``config``).

        ``under_replicated_only`` keeps only partitions whose ISR is smaller than their replicas.
        """
        request = apb.DescribeTopicsRequest(topics=list(topics), under_replicated_only=under_replicated_only)
        return cast(apb.DescribeTopicsResponse, self._call(self.admin.DescribeTopics, request))

    def elect_leaders(self, partitions: Sequence[tuple[str, int | None]] | None = None, *, timeout_ms: int = 0,
                      redirects: int = 3) -> apb.ElectLeadersResponse:
        """ElectLeaders (preferred leader election) of ``partitions``: (topic, partition), or (topic, None) for
        every partition of the topic; None: every partition of every replicated topic.

        The controller elects; a broker that is not the controller answers NOT_CONTROLLER
        naming it, and the call is made there instead (up to ``redirects`` times; a
        NOT_CONTROLLER without a known controller is returned as it is). Per-partition
        outcomes are in ``results`` (error_code NONE, ELECTION_NOT_NEEDED,
        PREFERRED_LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION ...).
        """
        topics: dict[str, list[int]] = {}
        for topic, partition in partitions or ():
            listed = topics.setdefault(topic, [])
            if partition is not None:
                listed.append(partition)
        whole = {topic for topic, partition in partitions or () if partition is None}
        request = apb.ElectLeadersRequest(all_topics=partitions is None, timeout_ms=timeout_ms, topic_partitions=[
            apb.TopicPartitions(topic=t, partitions=[] if t in whole else ps) for t, ps in topics.items()])
        deadline = (timeout_ms / 1000 if timeout_ms > 0 else 30.0) + self.timeout
        response = cast(apb.ElectLeadersResponse, self._call(self.admin.ElectLeaders, request, deadline))
        for _ in range(redirects):
            controller = response.controller
            if response.error_code != pb.NOT_CONTROLLER or controller.grpc_port <= 0:
                break
            with self._at(controller) as there:
                response = cast(apb.ElectLeadersResponse, there._call(there.admin.ElectLeaders, request, deadline))
        return response

    def alter_partition_reassignments(self, moves: Sequence[tuple[str, int, Sequence[int]]], *, timeout_ms: int = 0,
                                      redirects: int = 3) -> apb.AlterPartitionReassignmentsResponse:
        """AlterPartitionReassignments: move each (topic, partition) to its target replicas (preferred first).

        The controller answers once the moves are started; another broker answers
        NOT_CONTROLLER and the call is made at the controller (as :meth:`elect_leaders`).
        Per-partition outcomes are in ``results``.
        """
        request = apb.AlterPartitionReassignmentsRequest(timeout_ms=timeout_ms, reassignments=[
            apb.PartitionReassignment(topic=t, partition=p, replicas=list(r)) for t, p, r in moves])
        deadline = (timeout_ms / 1000 if timeout_ms > 0 else 30.0) + self.timeout
        return cast(apb.AlterPartitionReassignmentsResponse,
                    self._at_controller("AlterPartitionReassignments", request, deadline, redirects))

    def list_partition_reassignments(self, topics: Sequence[str] = (), *,
                                     redirects: int = 3) -> apb.ListPartitionReassignmentsResponse:
        """ListPartitionReassignments: the moves under way (of ``topics``; all when empty) and the throttle."""
        request = apb.ListPartitionReassignmentsRequest(topics=list(topics))
        return cast(apb.ListPartitionReassignmentsResponse,
                    self._at_controller("ListPartitionReassignments", request, None, redirects))

    def alter_replication_throttle(self, bytes_per_second: int, *,
                                   redirects: int = 3) -> apb.AlterReplicationThrottleResponse:
        """AlterReplicationThrottle: the rate (bytes/s) at which brokers fetch replicas being added; 0 removes it."""
        request = apb.AlterReplicationThrottleRequest(bytes_per_second=bytes_per_second)
        return cast(apb.AlterReplicationThrottleResponse,
                    self._at_controller("AlterReplicationThrottle", request, None, redirects))

    def delete_topic(self, topic: str, *, timeout_ms: int = 0) -> apb.DeleteTopicResponse:
        """DeleteTopic (any broker): a replicated topic cluster-wide, waiting up to ``timeout_ms`` (0: 30000) for
        the deletion to complete (REQUEST_TIMED_OUT: marked, completes later); a Kafka 0.7-style topic: the
        partitions this broker holds. Errors come back in ``error_code``."""
        request = apb.DeleteTopicRequest(topic=topic, timeout_ms=timeout_ms)
        deadline = (timeout_ms / 1000 if timeout_ms > 0 else 30.0) + self.timeout
        return cast(apb.DeleteTopicResponse, self._call(self.admin.DeleteTopic, request, deadline))

    def create_partitions(self, topic: str, count: int, *, timeout_ms: int = 0,
                          redirects: int = 3) -> apb.CreatePartitionsResponse:
        """CreatePartitions: grow the replicated ``topic`` to ``count`` partitions (never fewer). The controller
        adds them (another broker answers NOT_CONTROLLER and the call is made at the controller, as
        :meth:`elect_leaders`); ``partitions`` lists the new ones with their replicas."""
        request = apb.CreatePartitionsRequest(topic=topic, count=count, timeout_ms=timeout_ms)
        deadline = (timeout_ms / 1000 if timeout_ms > 0 else 30.0) + self.timeout
        return cast(apb.CreatePartitionsResponse, self._at_controller("CreatePartitions", request, deadline, redirects))

    def _at_controller(self, method: str, request: Any, deadline: float | None, redirects: int) -> Any:
        """Call the Admin ``method`` here, following NOT_CONTROLLER answers to the controller they name."""
        response = self._call(getattr(self.admin, method), request, deadline)
        for _ in range(redirects):
            controller = response.controller
            if response.error_code != pb.NOT_CONTROLLER or controller.grpc_port <= 0:
                break
            with self._at(controller) as there:
                response = there._call(getattr(there.admin, method), request, deadline)
        return response

    def describe_cluster(self) -> apb.DescribeClusterResponse:
        return cast(apb.DescribeClusterResponse, self._call(self.admin.DescribeCluster, apb.DescribeClusterRequest()))

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
