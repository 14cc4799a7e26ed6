"""Principals: who a client is, one name whatever the plane (data plane or gRPC).

A principal is a string ``Type:name`` as Kafka writes it: ``User:alice`` for a SASL
user or a TLS certificate's common name, ``User:ANONYMOUS`` for a client that did not
authenticate (a PLAINTEXT listener, a Kafka 0.7 client), and ``User:*`` in an ACL for
every principal.
"""

from __future__ import annotations

USER_TYPE = "User"
ANONYMOUS = "User:ANONYMOUS"
WILDCARD = "User:*"
BROKER = "Broker:rill"
"""The brokers themselves, calling each other's gRPC services (the controller, group routing) with the
cluster's internal token: always allowed, never named in an ACL. Its type is not ``User``, so no SASL
user and no certificate can ever be it (they are always ``User:<name>``)."""


def user(name: str) -> str:
    """The principal of user ``name``."""
    return f"{USER_TYPE}:{name}"


def parse(text: str) -> tuple[str, str]:
    """``"User:alice"`` -> ``("User", "alice")``.

    Raises:
        ValueError: no ``Type:`` prefix, or an empty type or name.
    """
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise ValueError(f"a principal is Type:name (for example User:alice), got {text!r}")
    return kind, name


def name_of(principal: str) -> str:
    """The name part of ``principal`` (``"User:alice"`` -> ``"alice"``)."""
    return parse(principal)[1]


__all__ = ["ANONYMOUS", "BROKER", "USER_TYPE", "WILDCARD", "name_of", "parse", "user"]
