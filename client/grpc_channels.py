"""gRPC channels as rill opens them: a subchannel pool of their own, and reconnects at most 1 s apart.

gRPC shares a connection (a subchannel) between all channels of a process to the same
address, and after failed connects it waits before the next attempt, the wait growing
up to 120 s. A broker that was down for a while and comes back was therefore reached
only when that wait ran out, even through a channel opened after it returned: the
controller's LeaderAndIsr to a restarted broker (a fresh channel, the old one closed)
failed with UNAVAILABLE for up to two minutes while another channel of the process kept
the old subchannel and its backoff alive. Each channel here has its own subchannel pool
(``grpc.use_local_subchannel_pool``), and the backoff stops growing at 1 s, Kafka's
``reconnect.backoff.max.ms`` default.

Credentials ride in every call's ``authorization`` metadata: a SASL user's as
``Basic base64(user:password)`` (:func:`open_channel`), the brokers' own as ``Bearer
<token>`` (:func:`broker_channel`: the cluster's broker token, which makes a call
``principal.BROKER``; over TLS when the brokers call each other's TLS gRPC port,
rill.broker.security.inter_broker_grpc). A call the broker's ACLs refuse fails with PERMISSION_DENIED and
names rill's error code in the :data:`ERROR_TRAILER` trailer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from rill.client.client_config import ConfigError
from rill.client.security.call_credentials import AUTHORIZATION, encode_basic
from rill.client.security.client_security import ClientSecurity

__all__ = ["BEARER", "CHANNEL_OPTIONS", "ERROR_TRAILER", "broker_channel", "insecure_channel", "open_channel",
           "tls_credentials"]

MAX_RECONNECT_BACKOFF_MS = 1000
BEARER = "Bearer "
"""The scheme of the brokers' token in ``authorization`` metadata."""
ERROR_TRAILER = "rill-error"
"""The trailer naming a refused call's rill error code (rill.v1.ErrorCode: ``GROUP_AUTHORIZATION_FAILED`` ...)."""

CHANNEL_OPTIONS = (
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
)


def insecure_channel(address: str) -> grpc.Channel:
    """A plaintext channel to ``address`` ("host:port") with :data:`CHANNEL_OPTIONS`."""
    return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)


class _Credentials(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Adds the SASL user's credentials to every call's metadata (rill.client.security.call_credentials)."""

    def __init__(self, value: str) -> None:
        self.value = value

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        metadata = [*(details.metadata or ()), (AUTHORIZATION, self.value)]
        return continuation(details._replace(metadata=metadata), request)


class _BrokerToken(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Adds ``authorization: Bearer <token()>`` to every call (read at each call: it may be replaced)."""

    def __init__(self, token: Callable[[], str]) -> None:
        self.token = token

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        metadata = [*(details.metadata or ()), (AUTHORIZATION, BEARER + self.token())]
        return continuation(details._replace(metadata=metadata), request)


def broker_channel(address: str, token: Callable[[], str] | None,
                   credentials: grpc.ChannelCredentials | None = None) -> grpc.Channel:
    """A channel from one broker to another's gRPC port, every call carrying the cluster's broker token
    (``token()``; None: no token, the calls are anonymous): over TLS with ``credentials`` (the peer's
    TLS gRPC port; the host in ``address`` must be one its certificate names), plaintext without."""
    if credentials is None:
        channel = insecure_channel(address)
    else:
        channel = grpc.secure_channel(address, credentials, options=CHANNEL_OPTIONS)
    return channel if token is None else grpc.intercept_channel(channel, _BrokerToken(token))


def _read(path: str) -> bytes | None:
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"TLS: cannot read {path}: {exc.strerror}") from exc


def tls_credentials(cafile: str, certfile: str, keyfile: str) -> grpc.ChannelCredentials:
    """TLS channel credentials from PEM files, each read now: the CA to verify the server with (empty:
    gRPC's default roots) and the certificate and key to show it (empty: none).

    Raises:
        ConfigError: a file cannot be read.
    """
    key, certificate = _read(keyfile), _read(certfile)
    return grpc.ssl_channel_credentials(root_certificates=_read(cafile),
                                        private_key=key if certificate is not None else None,
                                        certificate_chain=certificate if key is not None else None)


def open_channel(address: str, security: ClientSecurity | None = None) -> grpc.Channel:
    """A channel to ``address`` as ``security`` says: TLS (SSL, SASL_SSL: the broker's TLS gRPC port,
    verified against ``ssl.cafile``, with the client's certificate if it has one) and the SASL
    user's credentials on every call (SASL_PLAINTEXT, SASL_SSL); plaintext without it."""
    if security is None:
        return insecure_channel(address)
    if security.tls:
        cafile, certfile, keyfile = security.tls_files
        channel = grpc.secure_channel(address, tls_credentials(cafile, certfile, keyfile), options=CHANNEL_OPTIONS)
    else:
        channel = insecure_channel(address)
    if security.sasl:
        channel = grpc.intercept_channel(channel, _Credentials(encode_basic(security.username, security.password)))
    return channel
