"""Listeners as Kafka names them: ``PROTOCOL://host:port`` entries of ``listeners``.

A broker serves its data plane on one or more listeners, each with its own security
protocol: ``PLAINTEXT`` (no encryption, no authentication: every client is
``User:ANONYMOUS``, as Kafka 0.7 clients are), ``SSL`` (TLS; with a client certificate
the principal is its common name), ``SASL_PLAINTEXT`` and ``SASL_SSL`` (a SASL exchange
first, over plaintext or TLS). ``listeners`` lists where they bind; ``advertised.listeners``
where clients reach them, by the same names (a listener missing there is advertised
at its bound address, with ``advertised.host.name`` for a wildcard host).

The listener's name is its protocol (Kafka's custom names with
``listener.security.protocol.map`` are not supported), so a broker has at most one
listener per protocol, and METADATA answers with every broker's address for the
listener the request came in on.

An empty ``listeners`` means the old keys: one PLAINTEXT listener on ``host.name`` and
``port``; the README's commands and 0.7 clients keep working unchanged.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from rill.client.client_config import ConfigError

__all__ = ["Endpoint", "SecurityProtocol", "advertised_endpoints", "parse_listeners"]


class SecurityProtocol(enum.Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)

    @classmethod
    def parse(cls, text: str) -> SecurityProtocol:
        try:
            return cls(text.strip().upper())
        except ValueError:
            raise ConfigError(f"unknown security protocol {text!r}: expected one of "
                              f"{', '.join(p.value for p in cls)}") from None


@dataclass(frozen=True)
class Endpoint:
    """One listener: its protocol (which is also its name), host and port."""

    protocol: SecurityProtocol
    host: str
    port: int

    @property
    def name(self) -> str:
        return self.protocol.value

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.protocol.value}://{host}:{self.port}"


def _parse_one(item: str, key: str) -> Endpoint:
    scheme, sep, rest = item.partition("://")
    if not sep:
        raise ConfigError(f"{key}: {item!r} is not PROTOCOL://host:port (for example PLAINTEXT://0.0.0.0:9092)")
    protocol = SecurityProtocol.parse(scheme)
    if rest.startswith("["):  # [::1]:9092
        host, _, port_text = rest[1:].partition("]")
        port_text = port_text.removeprefix(":")
    else:
        host, _, port_text = rest.rpartition(":")
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"{key}: {item!r} has no port number") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"{key}: port {port} of {item!r} is out of range")
    return Endpoint(protocol, host or "0.0.0.0", port)


def parse_listeners(text: str, key: str = "listeners") -> list[Endpoint]:
    """``"PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9094"`` -> endpoints, in order.

    Raises:
        ConfigError: a malformed entry, an unknown protocol, or a protocol listed twice.
    """
    endpoints = [_parse_one(item.strip(), key) for item in text.split(",") if item.strip()]
    seen: set[SecurityProtocol] = set()
    for endpoint in endpoints:
        if endpoint.protocol in seen:
            raise ConfigError(f"{key}: {endpoint.name} is listed twice (one listener per protocol)")
        seen.add(endpoint.protocol)
    return endpoints


def advertised_endpoints(bound: list[Endpoint], advertised_text: str, default_host: str) -> dict[str, Endpoint]:
    """What clients are told, by listener name: ``advertised.listeners`` where it names the
    listener, else the bound address (its real port, after binding port 0) with
    ``default_host`` for a wildcard host.

    Raises:
        ConfigError: ``advertised.listeners`` names a listener that is not in ``listeners``.
    """
    advertised = {e.name: e for e in parse_listeners(advertised_text, "advertised.listeners")}
    names = {e.name for e in bound}
    unknown = sorted(set(advertised) - names)
    if unknown:
        raise ConfigError(f"advertised.listeners names {', '.join(unknown)}, which listeners does not have")
    result = {}
    for endpoint in bound:
        given = advertised.get(endpoint.name)
        if given is not None:
            result[endpoint.name] = given
        else:
            host = default_host if endpoint.host in ("", "0.0.0.0", "::") else endpoint.host
            result[endpoint.name] = Endpoint(endpoint.protocol, host, endpoint.port)
    return result
