"""Finding a group's coordinator (step 1 of :mod:`~rill.client.consumer.membership`).

``ListGroups([group])`` goes to a random broker (its gRPC port comes from METADATA);
the answer names the coordinator and the group's session timeout. A group that does
not exist yet is created (``CreateGroup`` with this consumer's session timeout and
``assignment.strategy``); the answer names the coordinator too. The coordinator is
then kept until the group client marks it unknown (a failed call, NOT_COORDINATOR,
GROUP_NOT_FOUND), and found again on the next call that needs it.

One gRPC client (:class:`~rill.client.grpc_client.AdminClient`) is kept per address, so
finding the same coordinator again reuses its channel. Every call here is blocking,
bounded by ``request.timeout.ms``.

Not thread-safe: driven by the consumer's poll loop.
"""

from __future__ import annotations

import random

import structlog

from rill.client.grpc_client import AdminClient, error_name
from rill.client.consumer.errors import CoordinatorNotAvailable, GroupCoordinatorError
from rill.client.errors import ConnectionClosed
from rill.client.cluster_metadata import ClusterMetadata
from rill.v1 import coordinator_pb2 as pb

log = structlog.get_logger(__name__)


class CoordinatorLookup:
    """The coordinator of one group: ``current`` (None while unknown) and the gRPC clients found so far.

    ``group_session_timeout_ms`` is the session timeout the existing group reported
    (this consumer's ``session.timeout.ms`` until ListGroups says otherwise).
    ``group_topics`` is what ListGroups listed as the group's topics (its own, its
    members' and its committed ones; ``()`` for a group this consumer just created;
    None: not known).
    """

    def __init__(self, group: str, metadata: ClusterMetadata, *, client_id: str, session_timeout_ms: int,
                 strategy: str, request_timeout: float) -> None:
        self.group = group
        self.metadata = metadata
        self.client_id = client_id
        self.session_timeout_ms = session_timeout_ms
        self.strategy = strategy
        self.request_timeout = request_timeout
        self.group_session_timeout_ms = session_timeout_ms
        self.group_topics: tuple[str, ...] | None = None
        self.current: AdminClient | None = None
        self._admins: dict[str, AdminClient] = {}

    def _admin(self, address: str) -> AdminClient:
        admin = self._admins.get(address)
        if admin is None:
            admin = self._admins[address] = AdminClient(address, timeout=self.request_timeout,
                                                        client_id=self.client_id, security=self.metadata.security)
        return admin

    def find(self) -> AdminClient:
        """ListGroups([group]) to a random broker; creates the group when it does not exist (blocking).

        Raises:
            ConnectionClosed: no broker or coordinator answered.
            CoordinatorNotAvailable: the broker asked does not know the group's coordinator yet
                (a takeover is under way): look again later.
            GroupCoordinatorError: the group cannot be created (bad name, session timeout ...).
        """
        if not self.metadata.brokers:
            self.metadata.refresh()
        brokers = list(self.metadata.brokers.values())
        if not brokers:
            raise ConnectionClosed("metadata names no broker")
        broker = random.choice(brokers)
        admin = self._admin(f"{broker.host}:{broker.grpc_port}")
        listing = admin.list_groups([self.group])
        info = listing.groups_info[0] if listing.groups_info else None
        if info is None or info.error_code == pb.GROUP_NOT_FOUND:
            created = admin.create_group(self.group, [], session_timeout_ms=self.session_timeout_ms,
                                         strategy=self.strategy)
            if created.error_code == pb.NOT_COORDINATOR:
                raise CoordinatorNotAvailable(f"no coordinator for group {self.group!r} yet (CreateGroup: NOT_COORDINATOR)")
            if created.error_code not in (pb.NONE, pb.GROUP_ALREADY_EXISTS):
                raise GroupCoordinatorError(f"cannot create group {self.group!r}: {error_name(created.error_code)}",
                                            created.error_code)
            if created.error_code == pb.NONE:
                log.info("consumer.group_created", group=self.group, strategy=self.strategy,
                         session_timeout_ms=self.session_timeout_ms)
            self.group_topics = () if created.error_code == pb.NONE else None
            controller = created.coordinator
        elif info.error_code == pb.NOT_COORDINATOR:  # the group's coordinator is being replaced
            raise CoordinatorNotAvailable(f"no broker names the coordinator of group {self.group!r} yet")
        elif info.error_code != pb.NONE:
            raise GroupCoordinatorError(f"ListGroups for {self.group!r}: {error_name(info.error_code)}",
                                        info.error_code)
        else:
            controller = info.controller_broker
            self.group_session_timeout_ms = int(info.session_timeout) or self.session_timeout_ms
            self.group_topics = tuple(info.topics)
        # the coordinator as METADATA names it to this client (its listener's host, and the TLS gRPC
        # port for a TLS client), else as ListGroups does
        known = self.metadata.brokers.get(controller.broker_id)
        host, port = (known.host, known.grpc_port) if known is not None else (controller.host, controller.grpc_port)
        self.current = self._admin(f"{host}:{port}")
        return self.current

    def get(self) -> AdminClient:
        """The known coordinator, or find() it (blocking); raises as find()."""
        return self.current if self.current is not None else self.find()

    def mark_unknown(self) -> None:
        """Find the coordinator again before the next call to it (a call failed or it moved)."""
        self.current = None

    def close(self) -> None:
        """Close every gRPC channel."""
        for admin in self._admins.values():
            admin.close()
        self._admins.clear()
        self.current = None
