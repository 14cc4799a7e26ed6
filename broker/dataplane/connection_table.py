"""The broker's open connections by client address, and who makes room for a new one.

Limits: ``max.connections`` in all and ``max.connections.per.ip`` from one address.
Neither can be used by one client to lock everyone else out: a new connection that
would exceed a limit takes the place of the least recently active *idle* connection
(nothing in flight) of its own address (per-address limit) or of the address holding
the most connections (overall limit). Only when no such connection exists is the new
one refused. So a client that floods the broker with idle connections cycles its own
connections, and a newcomer is served.

Each address's connections are kept in order of last activity, so finding the one to
close looks only at that address's oldest connections.

Thread-safety: none; the broker's event-loop thread owns it.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Protocol


class Peer(Protocol):
    fd: int
    ip: str

    def idle(self) -> bool: ...


class ConnectionTable:
    """Connections by descriptor and by address (see the module docstring)."""

    def __init__(self, max_connections: int, max_per_ip: int) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.by_fd: dict[int, Any] = {}
        self._by_ip: dict[str, OrderedDict[int, Any]] = {}

    def __len__(self) -> int:
        return len(self.by_fd)

    def add(self, conn: Peer) -> None:
        self.by_fd[conn.fd] = conn
        self._by_ip.setdefault(conn.ip, OrderedDict())[conn.fd] = conn

    def remove(self, conn: Peer) -> None:
        if self.by_fd.get(conn.fd) is conn:
            del self.by_fd[conn.fd]
        peers = self._by_ip.get(conn.ip)
        if peers is not None and peers.get(conn.fd) is conn:
            del peers[conn.fd]
            if not peers:
                del self._by_ip[conn.ip]

    def touch(self, conn: Peer) -> None:
        """``conn`` was active: it becomes its address's most recent connection."""
        peers = self._by_ip.get(conn.ip)
        if peers is not None and conn.fd in peers:
            peers.move_to_end(conn.fd)

    def count(self, ip: str) -> int:
        peers = self._by_ip.get(ip)
        return len(peers) if peers is not None else 0

    def make_room(self, ip: str) -> tuple[Any | None, str]:
        """Whether a new connection from ``ip`` may come in: ``(victim, limit)``.

        ``limit`` is "" when there is room; otherwise the name of the limit reached, and
        ``victim`` the idle connection to close for room (None: refuse the newcomer).
        """
        if self.count(ip) >= self.max_per_ip:
            return self._oldest_idle(self._by_ip.get(ip)), "max.connections.per.ip"
        if len(self.by_fd) >= self.max_connections:
            busiest = max(self._by_ip.values(), key=len, default=None)
            return self._oldest_idle(busiest), "max.connections"
        return None, ""

    @staticmethod
    def _oldest_idle(peers: OrderedDict[int, Any] | None) -> Any | None:
        if not peers:
            return None
        return next((conn for conn in peers.values() if conn.idle()), None)
