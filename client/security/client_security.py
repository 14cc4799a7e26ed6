"""A client's security settings, with kafka-python's names, and what a connection does with them.

    Producer({"bootstrap.servers": "localhost:9094", "security.protocol": "SASL_SSL",
              "ssl.cafile": "certs/ca.pem", "sasl.mechanism": "SCRAM-SHA-256",
              "sasl.plain.username": "alice", "sasl.plain.password": "alice-secret"})

- ``security.protocol``: ``PLAINTEXT`` (default), ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``,
  the protocol of the broker listener the client connects to.
- ``ssl.cafile``: the CA certificates (PEM) that sign the brokers' certificates (default:
  the system's); ``ssl.certfile`` and ``ssl.keyfile``: the client's own certificate and key,
  for a broker with ``ssl.client.auth``; ``ssl.check.hostname`` (default true): the
  broker's certificate must name the host the client connects to.
- ``sasl.mechanism``: ``PLAIN`` (default, as kafka-python's), ``SCRAM-SHA-256`` or
  ``SCRAM-SHA-512``; ``sasl.plain.username`` and ``sasl.plain.password``: the user (for
  every mechanism, as in kafka-python). PLAIN sends the password as it is: use it over
  TLS (``SASL_SSL``) only; SCRAM never sends it.

:class:`ClientSecurity` holds the parsed settings; :func:`from_settings` returns None for
PLAINTEXT so that plaintext connections carry nothing extra.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rill.client.client_config import ConfigError, Setting, boolean, choice

__all__ = ["ClientSecurity", "PROTOCOLS", "SASL_MECHANISMS", "SECURITY_SETTINGS", "from_settings"]

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _protocol(value: Any) -> str:
    return str(choice(*PROTOCOLS)(str(value).upper()))


def _mechanism(value: Any) -> str:
    return str(choice(*SASL_MECHANISMS)(str(value).upper()))


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


SECURITY_SETTINGS: tuple[Setting, ...] = (
    Setting("security.protocol", "PLAINTEXT", "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL: the brokers' listener's.",
            _protocol),
    Setting("ssl.cafile", "", "CA certificates (PEM) that sign the brokers' certificates; empty: the system's.", _text),
    Setting("ssl.certfile", "", "This client's certificate (PEM), for brokers with ssl.client.auth.", _text),
    Setting("ssl.keyfile", "", "This client's private key (PEM).", _text),
    Setting("ssl.check.hostname", True, "The broker's certificate must name the host connected to.", boolean),
    Setting("sasl.mechanism", "PLAIN", "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.", _mechanism),
    Setting("sasl.plain.username", "", "The SASL user (every mechanism).", _text),
    Setting("sasl.plain.password", "", "The SASL user's password.", _text),
)


@dataclass(frozen=True)
class ClientSecurity:
    """How to set up a connection: TLS (a context) and/or SASL (mechanism and credentials)."""

    protocol: str
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str = "PLAIN"
    username: str = ""
    password: str = ""
    tls_files: tuple[str, str, str] = ("", "", "")  # ssl.cafile, ssl.certfile, ssl.keyfile (for gRPC's own TLS)

    @property
    def tls(self) -> bool:
        return self.ssl_context is not None

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def principal_hint(self) -> str:
        """Who this client claims to be, for messages."""
        return f"User:{self.username}" if self.sasl else "the certificate's subject" if self.tls else "User:ANONYMOUS"


def client_context(cafile: str = "", certfile: str = "", keyfile: str = "", check_hostname: bool = True) -> ssl.SSLContext:
    """A TLS client context: verify the broker against ``cafile`` (or the system's CAs), present
    ``certfile``/``keyfile`` if given.

    Raises:
        ConfigError: a file is missing or unreadable, or a key without its certificate.
    """
    if bool(certfile) != bool(keyfile):
        raise ConfigError("ssl.certfile and ssl.keyfile go together (the client's certificate and its key)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = check_hostname
    try:
        if cafile:
            context.load_verify_locations(cafile)
        else:
            context.load_default_certs()
        if certfile:
            context.load_cert_chain(certfile, keyfile)
    except FileNotFoundError as exc:
        raise ConfigError(f"TLS: cannot read {exc.filename}: {exc.strerror}") from exc
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"TLS: cannot load the client's certificates: {exc}") from exc
    return context


def from_settings(values: Mapping[str, Any]) -> ClientSecurity | None:
    """The security of a client's resolved settings (SECURITY_SETTINGS among them); None for PLAINTEXT.

    Raises:
        ConfigError: unreadable TLS files, or a SASL protocol without a user name.
    """
    protocol = values.get("security.protocol", "PLAINTEXT")
    if protocol == "PLAINTEXT":
        return None
    context = None
    if protocol in ("SSL", "SASL_SSL"):
        context = client_context(values.get("ssl.cafile", ""), values.get("ssl.certfile", ""),
                                 values.get("ssl.keyfile", ""), values.get("ssl.check.hostname", True))
    username = values.get("sasl.plain.username", "")
    if protocol.startswith("SASL_") and not username:
        raise ConfigError(f"security.protocol {protocol} needs sasl.plain.username and sasl.plain.password")
    return ClientSecurity(protocol, context, values.get("sasl.mechanism", "PLAIN"), username,
                          values.get("sasl.plain.password", ""),
                          (values.get("ssl.cafile", ""), values.get("ssl.certfile", ""), values.get("ssl.keyfile", "")))
