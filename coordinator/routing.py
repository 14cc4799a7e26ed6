"""Groups in a cluster, as the gRPC servicer sees them: who coordinates what, and forwarding.

In a cluster (rill.broker.cluster.group_log_placement) each group has one coordinator broker. The
servicer asks a :class:`Router` whether this broker coordinates a group; if not, the
group RPCs answer NOT_COORDINATOR (the consumer asks ListGroups where to go), except:

- **CreateGroup** may go to any broker (seed 003): a broker that is not the
  coordinator forwards it there and returns its answer (which names the coordinator);
  when the coordinator cannot be reached it answers NOT_COORDINATOR with
  ``coordinator`` set.
- **ListGroups** may go to any broker: named groups coordinated elsewhere are asked of
  their coordinators (one forwarded call per coordinator); when one cannot be reached,
  its groups answer NOT_COORDINATOR, always with ``controller_broker`` set to the
  coordinator this broker knows. With no names, the listing is every live broker's own
  groups (this broker's, and one forwarded call to each other broker; a broker that
  does not answer is left out and logged), as Kafka's AdminClient lists groups.

A forwarded call carries the metadata ``x-rill-forwarded: 1`` and is never forwarded
again (two brokers whose views of the cluster briefly differ cannot bounce it): it is
answered from this broker's own groups only, NOT_COORDINATOR for the others.

Forwarded calls authenticate as the brokers (``principal.BROKER``, the cluster's broker
token given to :class:`Peers`, over TLS when brokers call each other so), so the broker that answers them does not judge them
again: the client's own principal was authorized by the broker it called, which also
trims a forwarded ListGroups' answer to what that principal may describe.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

import grpc
import structlog

from rill.v1 import coordinator_pb2 as pb
from rill.v1 import coordinator_pb2_grpc as pb_grpc
from rill.client.grpc_channels import broker_channel

log = structlog.get_logger(__name__)

FORWARDED_KEY = "x-rill-forwarded"
FORWARDED = ((FORWARDED_KEY, "1"),)
FORWARD_TIMEOUT_S = 5.0


class Router(Protocol):
    """Where groups live. Thread-safe; ``owns`` is called on every group RPC, so it must be cheap."""

    def owns(self, group: str) -> bool:
        """Does this broker coordinate ``group`` now (and has it loaded it)?"""
        ...

    def coordinator(self, group: str) -> pb.Broker | None:
        """The coordinator of ``group`` in the latest view of the cluster; None when no broker is live."""
        ...

    def is_me(self, broker: pb.Broker) -> bool:
        ...

    def live_brokers(self) -> list[pb.Broker]:
        """Every live broker with a coordinator, this one included."""
        ...


class Peers:
    """gRPC stubs of the other brokers' coordinators, one channel per address. Thread-safe.

    ``token()`` is the cluster's broker token, sent with every call (None: the calls are
    anonymous, which only brokers without authorizer.enable accept). ``credentials``: the
    calls go over TLS (None: plaintext). A ``pb.Broker`` names a broker as clients see it;
    ``resolve(broker)`` gives the address this broker calls it on instead (its TLS gRPC
    port, when brokers call each other over TLS: rill.broker.security.inter_broker_grpc),
    or None for its ``host:grpc_port``.
    """

    def __init__(self, token: Callable[[], str] | None = None, credentials: grpc.ChannelCredentials | None = None,
                 resolve: Callable[[pb.Broker], str | None] | None = None) -> None:
        self.token = token
        self.credentials = credentials
        self.resolve = resolve
        self._stubs: dict[str, tuple[grpc.Channel, Any]] = {}
        self._lock = threading.Lock()

    def address(self, broker: pb.Broker) -> str:
        """Where ``broker``'s coordinator is called: ``"host:port"``."""
        resolved = self.resolve(broker) if self.resolve is not None else None
        return resolved or f"{broker.host}:{broker.grpc_port}"

    def stub(self, broker: pb.Broker) -> Any:
        address = self.address(broker)
        with self._lock:
            found = self._stubs.get(address)
            if found is None:
                channel = broker_channel(address, self.token, self.credentials)
                found = self._stubs[address] = (channel, pb_grpc.GroupCoordinatorStub(channel))  # type: ignore[no-untyped-call]
            return found[1]

    def close(self) -> None:
        with self._lock:
            stubs, self._stubs = self._stubs, {}
        for channel, _ in stubs.values():
            channel.close()


def is_forwarded(context: Any) -> bool:
    metadata = context.invocation_metadata() if hasattr(context, "invocation_metadata") else None
    return any(k == FORWARDED_KEY for k, _ in metadata or ())


def _timeout(remaining: float | None) -> float:
    return FORWARD_TIMEOUT_S if remaining is None else max(0.05, min(remaining, FORWARD_TIMEOUT_S))


def forward_create(router: Router, peers: Peers, request: pb.CreateGroupRequest,
                   remaining: float | None) -> pb.CreateGroupResponse:
    """CreateGroup at a broker that does not coordinate the group: the coordinator's answer."""
    target = router.coordinator(request.consumer_group)
    refused = pb.CreateGroupResponse(consumer_group=request.consumer_group, error_code=pb.NOT_COORDINATOR,
                                     coordinator=target)
    if target is None or router.is_me(target):
        return refused  # no live broker, or this one is still loading the group
    try:
        return peers.stub(target).CreateGroup(request, timeout=_timeout(remaining), metadata=FORWARDED)  # type: ignore[no-any-return]
    except grpc.RpcError as exc:
        log.warning("coordinator.forward_failed", rpc="CreateGroup", group=request.consumer_group,
                    coordinator=target.broker_id, error=str(exc.code() if hasattr(exc, "code") else exc))
        return refused


def list_groups(router: Router, peers: Peers, local: Callable[[pb.ListGroupsRequest], pb.ListGroupsResponse],
                request: pb.ListGroupsRequest, forwarded: bool, remaining: float | None) -> pb.ListGroupsResponse:
    """ListGroups in a cluster (see the module docstring); ``local`` lists this broker's own groups."""
    names = list(request.consumer_groups)
    if not names:
        return _list_all(router, peers, local, request, forwarded, remaining)
    infos: dict[str, pb.GroupInfo] = {}
    mine = [n for n in names if router.owns(n)]
    if mine:
        infos.update((i.group_name, i) for i in local(pb.ListGroupsRequest(client_id=request.client_id,
                                                                             consumer_groups=mine)).groups_info)
    elsewhere: dict[int, tuple[pb.Broker | None, list[str]]] = {}
    for name in names:
        if name in infos:
            continue
        target = router.coordinator(name)
        if forwarded or target is None or router.is_me(target):  # not loaded yet, or do not bounce
            infos[name] = pb.GroupInfo(group_name=name, error_code=pb.NOT_COORDINATOR, controller_broker=target)
            continue
        elsewhere.setdefault(target.broker_id, (target, []))[1].append(name)
    for target, group_names in elsewhere.values():
        assert target is not None
        infos.update((i.group_name, i) for i in _ask(router, peers, target, request.client_id, group_names, remaining))
    response = pb.ListGroupsResponse(client_id=request.client_id, error_code=pb.NONE)
    for name in names:
        info = infos.get(name) or pb.GroupInfo(group_name=name, error_code=pb.GROUP_NOT_FOUND)
        if not info.HasField("controller_broker"):  # a group that does not exist yet: where it would live
            target = router.coordinator(name)
            if target is not None:
                info.controller_broker.CopyFrom(target)
        response.groups_info.append(info)
        if info.error_code != pb.NONE and response.error_code == pb.NONE:
            response.error_code = info.error_code
    return response


def _ask(router: Router, peers: Peers, target: pb.Broker, client_id: str, names: list[str],
         remaining: float | None) -> list[pb.GroupInfo]:
    """ListGroups(names) at their coordinator; NOT_COORDINATOR for each when it does not answer."""
    try:
        answer = peers.stub(target).ListGroups(pb.ListGroupsRequest(client_id=client_id, consumer_groups=names),
                                               timeout=_timeout(remaining), metadata=FORWARDED)
        return list(answer.groups_info)
    except grpc.RpcError as exc:
        log.warning("coordinator.forward_failed", rpc="ListGroups", coordinator=target.broker_id, groups=len(names),
                    error=str(exc.code() if hasattr(exc, "code") else exc))
        return [pb.GroupInfo(group_name=name, error_code=pb.NOT_COORDINATOR, controller_broker=target) for name in names]


def _list_all(router: Router, peers: Peers, local: Callable[[pb.ListGroupsRequest], pb.ListGroupsResponse],
              request: pb.ListGroupsRequest, forwarded: bool, remaining: float | None) -> pb.ListGroupsResponse:
    infos = [i for i in local(pb.ListGroupsRequest(client_id=request.client_id)).groups_info if router.owns(i.group_name)]
    if not forwarded:
        for broker in router.live_brokers():
            if router.is_me(broker):
                continue
            try:
                answer = peers.stub(broker).ListGroups(pb.ListGroupsRequest(client_id=request.client_id),
                                                       timeout=_timeout(remaining), metadata=FORWARDED)
            except grpc.RpcError as exc:
                log.warning("coordinator.forward_failed", rpc="ListGroups", coordinator=broker.broker_id,
                            error=str(exc.code() if hasattr(exc, "code") else exc))
                continue
            infos.extend(answer.groups_info)
    infos.sort(key=lambda i: str(i.group_name))
    response = pb.ListGroupsResponse(client_id=request.client_id, error_code=pb.NONE)
    response.groups_info.extend(infos)
    return response


__all__ = ["FORWARDED", "Peers", "Router", "forward_create", "is_forwarded", "list_groups"]
