"""A data-plane listener: a listening socket and the security its connections get.

:class:`ListenerSpec` says what to bind (an :class:`~rill.broker.security.listeners.Endpoint`),
with the TLS context of an SSL or SASL_SSL listener and, on a SASL listener, how to make
each connection's SASL authenticator. :class:`Listener` is the bound result, registered
with the server's selector (its selector key's data is the listener itself).
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rill.broker.security.listeners import Endpoint

__all__ = ["Listener", "ListenerSpec", "MAX_UNAUTHENTICATED_FRAME"]

MAX_UNAUTHENTICATED_FRAME = 512 * 1024
"""The largest request a client may send before it has authenticated (Kafka's
``sasl.server.max.receive.size``): an unauthenticated client cannot make the broker
reserve request memory for a 100 MiB frame."""


@dataclass(frozen=True)
class ListenerSpec:
    endpoint: Endpoint
    tls: ssl.SSLContext | None = None
    authenticator: Callable[[Any], Any] | None = None
    """Makes the SASL authenticator of a new connection (given the connection); None: no SASL."""
    max_unauthenticated_frame: int = MAX_UNAUTHENTICATED_FRAME


@dataclass(eq=False)
class Listener:
    endpoint: Endpoint  # with the port actually bound (port 0 picks one)
    sock: socket.socket
    tls: ssl.SSLContext | None
    authenticator: Callable[[Any], Any] | None
    max_unauthenticated_frame: int

    @property
    def host(self) -> str:
        return self.endpoint.host

    @property
    def port(self) -> int:
        return self.endpoint.port

    @classmethod
    def bind(cls, spec: ListenerSpec) -> Listener:
        """Bind and listen (non-blocking). Raises OSError (the port is taken, say)."""
        sock = socket.create_server((spec.endpoint.host, spec.endpoint.port), backlog=4096, reuse_port=False)
        sock.setblocking(False)
        host, port = sock.getsockname()[:2]
        bound = Endpoint(spec.endpoint.protocol, str(host), int(port))
        return cls(bound, sock, spec.tls, spec.authenticator, spec.max_unauthenticated_frame)
