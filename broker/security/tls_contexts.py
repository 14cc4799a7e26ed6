"""The broker's TLS settings: an ``ssl.SSLContext`` for its TLS listeners, and who a peer's certificate names.

Kafka's keys, adapted to PEM files (Python's ``ssl`` reads PEM, not Java keystores):
``ssl.certfile`` (the broker's certificate chain), ``ssl.keyfile`` (its private key),
``ssl.cafile`` (the CAs whose client certificates are trusted) and
``ssl.client.auth``: ``none`` (no client certificate asked), ``requested`` (asked, checked
if sent, optional) or ``required`` (a connection without a valid one fails its handshake).

A client that presents a verified certificate is ``User:<common name>``: the same name a
SASL user of that name has, so one ACL covers a client whatever the plane and whatever
the way it authenticated. (Kafka's default principal is the whole distinguished name,
shortened with ``ssl.principal.mapping.rules``; rill's is that rule fixed to the CN,
because gRPC servers in Python see only the CN.)
"""

from __future__ import annotations

import ssl
from typing import Any

from rill.client.client_config import ConfigError
from rill.client.security import principal

__all__ = ["CLIENT_AUTH", "principal_from_certificate", "server_context"]

CLIENT_AUTH = ("none", "requested", "required")
_VERIFY = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_context(certfile: str, keyfile: str, cafile: str, client_auth: str) -> ssl.SSLContext:
    """A server context for TLS listeners (TLS 1.2 or later).

    Raises:
        ConfigError: a file is missing or unreadable, the key does not match the
            certificate, or client certificates are asked for without ``ssl.cafile``.
    """
    if not certfile or not keyfile:
        raise ConfigError("a TLS listener (SSL or SASL_SSL) needs ssl.certfile and ssl.keyfile")
    if client_auth not in _VERIFY:
        raise ConfigError(f"ssl.client.auth: expected one of {', '.join(CLIENT_AUTH)}, got {client_auth!r}")
    if client_auth != "none" and not cafile:
        raise ConfigError(f"ssl.client.auth = {client_auth} needs ssl.cafile (the CAs that sign client certificates)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certfile, keyfile)
        if cafile:
            context.load_verify_locations(cafile)
    except FileNotFoundError as exc:
        raise ConfigError(f"TLS: cannot read {exc.filename}: {exc.strerror}") from exc
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"TLS: cannot load ssl.certfile {certfile} / ssl.keyfile {keyfile}"
                          f"{' / ssl.cafile ' + cafile if cafile else ''}: {exc}") from exc
    context.verify_mode = _VERIFY[client_auth]
    return context


def principal_from_certificate(certificate: dict[str, Any] | None) -> str | None:
    """``User:<CN>`` for a verified peer certificate (``SSLSocket.getpeercert()``), else None."""
    if not certificate:
        return None
    for rdn in certificate.get("subject", ()):
        for name, value in rdn:
            if name == "commonName" and value:
                return principal.user(str(value))
    return None
