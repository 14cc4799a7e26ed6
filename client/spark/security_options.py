"""The ``rill`` source's security options: every rill client's security settings, passed through.

The keys are the clients' own (kafka-python's names; rill.client.security.client_security),
accepted as they are or with Spark's Kafka-source prefix ``kafka.``, as ``bootstrap.servers``
is::

    .option("kafka.security.protocol", "SASL_SSL")     # or "security.protocol"
    .option("kafka.ssl.cafile", "/etc/rill/ca.pem")
    .option("kafka.sasl.mechanism", "SCRAM-SHA-256")
    .option("kafka.sasl.plain.username", "alice")
    .option("kafka.sasl.plain.password", "alice-secret")

:func:`security_settings` picks them out of a query's options as plain strings (client
key -> value), which is what travels to the executors with the reader or writer: an
``ssl.SSLContext`` cannot be pickled, so each task builds its own with
:func:`client_security`. The TLS files must therefore exist at the same paths on every
executor, as the truststore of Spark's Kafka source must.
"""

from __future__ import annotations

from collections.abc import Mapping

from rill.client.client_config import ConfigError, resolve
from rill.client.security.client_security import SECURITY_SETTINGS, ClientSecurity, from_settings

__all__ = ["PREFIX", "SECURITY_KEYS", "client_security", "option_keys", "security_settings"]

PREFIX = "kafka."
SECURITY_KEYS = tuple(s.name for s in SECURITY_SETTINGS)
"""The client keys: security.protocol, ssl.cafile, ssl.certfile, ssl.keyfile, ssl.check.hostname,
sasl.mechanism, sasl.plain.username, sasl.plain.password."""


def option_keys() -> set[str]:
    """Every option name this module reads, lower case (each key bare and with ``kafka.``)."""
    return {k for key in SECURITY_KEYS for k in (key, PREFIX + key)}


def security_settings(options: Mapping[str, str]) -> dict[str, str]:
    """The security settings among a query's options, by client key; empty for a plaintext query.

    ``options`` must look keys up case-insensitively (Spark's map does). The settings are
    checked here, on the driver, so a bad one fails the query at planning time.

    Raises:
        ConfigError: a key given both bare and with ``kafka.`` (different values), a bad value,
            an unreadable TLS file, or a SASL protocol without ``sasl.plain.username``.
    """
    settings: dict[str, str] = {}
    for key in SECURITY_KEYS:
        bare, prefixed = options.get(key), options.get(PREFIX + key)
        if bare is not None and prefixed is not None and bare != prefixed:
            raise ConfigError(f"options {key!r} and {PREFIX + key!r} differ: give one of them")
        value = prefixed if prefixed is not None else bare
        if value is not None:
            settings[key] = value
    client_security(settings)
    return settings


def client_security(settings: Mapping[str, str]) -> ClientSecurity | None:
    """The connection security of :func:`security_settings`' result; None for PLAINTEXT.

    Raises:
        ConfigError: as :func:`security_settings` (on an executor whose TLS files are missing, say),
            saying that these are the source's security options.
    """
    if not settings:
        return None
    try:
        return from_settings(resolve(SECURITY_SETTINGS, settings, {}))
    except ConfigError as exc:
        raise ConfigError(f"the rill source's security options (kafka.security.protocol, kafka.ssl.*, "
                          f"kafka.sasl.*): {exc}") from None
