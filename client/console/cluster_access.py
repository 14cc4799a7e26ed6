"""How the console reaches the cluster: rill's own clients, found as the ``rill`` commands find them.

- **gRPC** (Admin and GroupCoordinator services): the address a bootstrap broker
  publishes in METADATA (rill.client.cli.bootstrap's ``admin_address``, or ``--grpc``),
  and for a group its coordinator, which ListGroups names (``coordinator_address``,
  shared with ``rill groups``). One :class:`~rill.client.admin.AdminClient` per address,
  kept open.
- **Data plane** (METADATA, OFFSETS, TIME_INDEX, fetches): a
  :class:`~rill.client.cluster_metadata.ClusterMetadata`, and ``rill consume``'s
  :class:`~rill.client.cli.consume.TopicReader` for a partition's messages.

The bootstrap addresses are the ``--bootstrap-server`` ones plus every broker METADATA
has named since the console started, so a console whose first bootstrap broker
stopped finds the cluster through the others. A call that fails with ConnectionClosed
(the broker behind the gRPC address is gone) is made once more at a freshly found
address. The brokers seen are kept (:meth:`ClusterAccess.seen_brokers`) so the brokers
page can name one that has gone.

Thread-safe: the pages (in the web server's worker threads) and the lag sampler share
one instance. Every call blocks, bounded by ``--timeout``.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from rill.client.cli.bootstrap import admin_address
from rill.client.cli.command_config import security_of
from rill.client.cli.consume import TopicReader
from rill.client.cli.group_admin import coordinator_address
from rill.client.cli.rewind_plan import DataPlane
from rill.client.cluster_metadata import ClusterMetadata
from rill.client.console.console_errors import NotFound
from rill.client.errors import AuthenticationFailed, ConnectionClosed, RillError
from rill.client.grpc_client import AdminClient, error_name
from rill.client.protocol import requests as rq
from rill.client.security.client_security import ClientSecurity
from rill.v1 import coordinator_pb2 as pb

__all__ = ["ClusterAccess", "SeenBroker"]

T = TypeVar("T")


@dataclass(frozen=True)
class SeenBroker:
    """A broker METADATA named at some point: where it was, and when it was last named (time.time())."""

    broker: rq.BrokerInfo
    last_seen: float


class ClusterAccess:
    """The console's clients of one cluster, from the parsed ``rill console`` arguments; see the module docstring."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.timeout = float(args.timeout)
        self.security: ClientSecurity | None = security_of(args)
        self._lock = threading.Lock()  # the dicts and the address below (held for no network call)
        self._metadata_lock = threading.Lock()  # the ClusterMetadata, which is not thread-safe
        self._metadata = ClusterMetadata(list(args.bootstrap), timeout=self.timeout, security=self.security)
        self._seen: dict[int, SeenBroker] = {}
        self._address: str | None = None
        self._clients: dict[str, AdminClient] = {}

    # ---------------------------------------------------------------- data plane

    def metadata(self) -> rq.Metadata:
        """METADATA for every topic the console's principal may describe, from any reachable broker.

        Raises:
            ConnectionClosed: no broker answered (AuthenticationFailed: every one refused the credentials).
        """
        with self._metadata_lock:
            meta = self._metadata.refresh()
        now = time.time()
        with self._lock:
            for b in meta.brokers:
                self._seen[b.broker_id] = SeenBroker(b, now)
        return meta

    def seen_brokers(self) -> dict[int, SeenBroker]:
        """Every broker METADATA has named since the console started, by id (the live ones and those gone)."""
        with self._lock:
            return dict(self._seen)

    def bootstrap(self) -> list[tuple[str, int]]:
        """Data-plane addresses to start from: ``--bootstrap-server``, then the brokers seen."""
        given = list(self.args.bootstrap)
        with self._lock:
            seen = [(s.broker.host, s.broker.port) for s in self._seen.values()]
        return given + [a for a in seen if a not in given]

    def reader(self, topic: str, fetch_size: int) -> TopicReader:
        """``rill consume``'s reader of ``topic`` (each partition read at its leader); close it after use."""
        return TopicReader(self.bootstrap(), topic, fetch_size=fetch_size, timeout=self.timeout,
                           security=self.security)

    def data_plane(self) -> DataPlane:
        """Where a rewind's shift reads messages."""
        return DataPlane(self.bootstrap(), self.timeout, self.security)

    # ---------------------------------------------------------------- gRPC

    def admin_call(self, call: Callable[[AdminClient], T]) -> T:
        """``call(admin)`` at a bootstrap broker's gRPC address; once more at a fresh address if that broker is gone.

        Raises:
            ConnectionClosed: no broker answered; RillError: the call failed otherwise (refused ...).
        """
        try:
            return call(self._admin())
        except AuthenticationFailed:
            raise
        except ConnectionClosed:
            with self._lock:
                self._address = None  # found again, through any broker that answers
            return call(self._admin())

    def group_call(self, group: str, call: Callable[[AdminClient, pb.GroupInfo], T]) -> T:
        """``call(admin, info)`` at ``group``'s coordinator, with the group's ListGroups entry.

        Raises:
            NotFound: no such group. GroupAuthorizationFailed: the ACLs refuse the console the group.
            RillError: the coordinator is moving (try again), or a call failed.
        """
        listing = self.admin_call(lambda admin: admin.list_groups([group]))
        info = listing.groups_info[0] if listing.groups_info else None
        if info is None or info.error_code == pb.GROUP_NOT_FOUND:
            # ListGroups leaves out a group the principal may not describe: DescribeGroup says "refused" then
            described = self.admin_call(lambda admin: admin.describe_group(group))
            if described.error_code in (pb.NONE, pb.GROUP_NOT_FOUND):
                raise NotFound(f"group {group!r} does not exist")
            raise RillError(f"group {group!r}: {error_name(described.error_code)}")
        if info.error_code != pb.NONE:
            raise RillError(f"group {group!r}: {error_name(info.error_code)} (its coordinator is moving: try again)")
        return call(self.coordinator(info), info)

    def coordinator(self, info: pb.GroupInfo,
                    brokers: Callable[[], Sequence[rq.BrokerInfo]] | None = None) -> AdminClient:
        """The client of the coordinator ListGroups names in ``info`` (the bootstrap broker's when it names none).

        With TLS or SASL its port is looked up in METADATA: ``brokers()`` if given (a caller asking for many
        groups asks METADATA once), else a METADATA request.
        """
        address = coordinator_address(info, self.security, brokers or (lambda: self.metadata().brokers))
        return self._client(address) if address is not None else self._admin()

    def _admin(self) -> AdminClient:
        with self._lock:
            address = self._address
        if address is None:
            args = argparse.Namespace(**vars(self.args))
            args.bootstrap = self.bootstrap()
            address = admin_address(args)
            with self._lock:
                self._address = address
        return self._client(address)

    def _client(self, address: str) -> AdminClient:
        with self._lock:
            client = self._clients.get(address)
            if client is None:
                client = self._clients[address] = AdminClient(address, self.timeout, client_id="rill-console",
                                                              security=self.security)
            return client

    def close(self) -> None:
        """Close every gRPC channel (the console is stopping)."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()
