"""Who makes a gRPC call: the principal of every call to the coordinator and admin services.

A call's principal is, in this order:

1. ``User:<name>`` when the call carries SASL credentials in its metadata
   (rill.client.security.call_credentials) and they are right; wrong ones fail the call
   with UNAUTHENTICATED at once, before any handler runs;
2. ``User:<CN>`` of the client's certificate on the TLS port when client certificates are
   required (gRPC in Python shows a servicer the peer's certificate only then);
3. ``User:ANONYMOUS`` otherwise.

The interceptors (one for the sync server, one for grpc.aio) put the principal and the
client's address in context variables for the call, where the servicers' authorization
reads them (:func:`caller`). The health and reflection services are not intercepted.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grpc
import structlog

from rill.client.security import principal as principals
from rill.client.security.call_credentials import AUTHORIZATION, decode_basic

__all__ = ["AioAuthInterceptor", "AuthInterceptor", "CallAuthenticator", "ServerSecurity", "Unauthenticated",
           "caller"]

log = structlog.get_logger(__name__)
audit = structlog.get_logger("rill.audit")

_principal: contextvars.ContextVar[str] = contextvars.ContextVar("rill_principal", default=principals.ANONYMOUS)
_host: contextvars.ContextVar[str] = contextvars.ContextVar("rill_peer_host", default="")
_RILL_SERVICES = ("/rill.v1.",)


@dataclass
class ServerSecurity:
    """How a gRPC server authenticates: the call authenticator, and its TLS port (``tls_address``, with
    ``credentials`` from ``grpc.ssl_server_credentials``; None: no TLS port). ``tls_port`` is set once bound."""

    authenticator: CallAuthenticator
    tls_address: str | None = None
    credentials: Any = None
    tls_port: int = -1


class Unauthenticated(Exception):
    """The call's credentials are wrong (the message says why, without telling a user apart)."""


def caller() -> tuple[str, str]:
    """``(principal, host)`` of the call being served (ANONYMOUS and "" outside one)."""
    return _principal.get(), _host.get()


def peer_host(peer: str) -> str:
    """The address part of gRPC's peer string (``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000``)."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        return rest.rsplit(":", 1)[0].strip("[]")
    if kind == "ipv4":
        return rest.rsplit(":", 1)[0]
    return rest or peer


class CallAuthenticator:
    """Turns a call's metadata and TLS context into its principal.

    ``check_password(user, password)`` says whether they are right (None: the broker has no
    user store, so every credential is refused).
    """

    def __init__(self, check_password: Callable[[str, str], bool] | None) -> None:
        self.check_password = check_password

    def principal(self, metadata: Sequence[tuple[str, Any]] | None, auth_context: Mapping[str, Any] | None) -> str:
        """Raises Unauthenticated for credentials that are malformed or wrong."""
        value = next((v for k, v in metadata or () if k == AUTHORIZATION), None)
        if value is not None:
            try:
                user, password = decode_basic(str(value))
            except ValueError as exc:
                raise Unauthenticated(f"malformed credentials: {exc}") from None
            if self.check_password is None or not self.check_password(user, password):
                raise Unauthenticated("authentication failed: invalid user name or password")
            return principals.user(user)
        names = (auth_context or {}).get("x509_common_name") or []
        if names:
            name = names[0]
            return principals.user(name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name))
        return principals.ANONYMOUS


def _rill_method(method: str) -> bool:
    return method.startswith(_RILL_SERVICES)


class AuthInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
    """The sync server's: authenticates each call to rill's services on the worker thread that serves it."""

    def __init__(self, authenticator: CallAuthenticator) -> None:
        self.authenticator = authenticator

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        handler = continuation(details)
        if handler is None or handler.unary_unary is None or not _rill_method(details.method):
            return handler
        inner, authenticator, method = handler.unary_unary, self.authenticator, details.method
        metadata = tuple(details.invocation_metadata or ())

        def wrapper(request: Any, context: grpc.ServicerContext) -> Any:
            host = peer_host(context.peer())
            try:
                who = authenticator.principal(metadata, context.auth_context())
            except Unauthenticated as exc:
                audit.warning("audit.authentication_failed", peer=host, rpc=method, reason=str(exc))
                context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
            tokens = _principal.set(who), _host.set(host)
            try:
                return inner(request, context)
            finally:
                _principal.reset(tokens[0])
                _host.reset(tokens[1])

        return grpc.unary_unary_rpc_method_handler(wrapper, request_deserializer=handler.request_deserializer,
                                                   response_serializer=handler.response_serializer)


class AioAuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """The grpc.aio server's: the same, in the call's task (its context reaches the worker threads)."""

    def __init__(self, authenticator: CallAuthenticator) -> None:
        self.authenticator = authenticator
        self._wrapped: dict[str, Any] = {}

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        method = details.method
        wrapped = self._wrapped.get(method)
        if wrapped is not None:
            return wrapped
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None or not _rill_method(method):
            return handler
        inner, authenticator = handler.unary_unary, self.authenticator

        async def wrapper(request: Any, context: Any) -> Any:
            host = peer_host(context.peer())
            try:
                who = authenticator.principal(context.invocation_metadata(), context.auth_context())
            except Unauthenticated as exc:
                audit.warning("audit.authentication_failed", peer=host, rpc=method, reason=str(exc))
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
            _principal.set(who)
            _host.set(host)
            return await inner(request, context)

        wrapped = self._wrapped[method] = grpc.unary_unary_rpc_method_handler(
            wrapper, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)
        return wrapped
