"""Who makes a gRPC call, and whether they may: authentication and authorization of every call to
the coordinator, admin and replica control services.

A call's principal is, in this order:

1. ``principal.BROKER`` when the call carries ``authorization: Bearer <token>`` with the
   cluster's broker token (brokers calling each other: the controller's LeaderAndIsr,
   forwarded group calls); any other bearer token fails the call with UNAUTHENTICATED;
2. ``User:<name>`` when the call carries SASL credentials in its metadata
   (rill.client.security.call_credentials) and they are right; wrong ones fail the call
   with UNAUTHENTICATED at once, before any handler runs;
3. ``User:<CN>`` of the client's certificate on the TLS port when client certificates are
   required (gRPC in Python shows a servicer the peer's certificate only then);
4. ``User:ANONYMOUS`` otherwise.

No user or certificate can be the brokers' principal: a user or common name that would
map to it is refused as a wrong credential.

The interceptors (one for the sync server, one for grpc.aio) put the principal and the
client's address in context variables for the call (:func:`caller`). With
``ServerSecurity.authorize`` they then authorize the call before its handler runs
(rill.coordinator.grpc_authorization: the table of what each RPC needs): a refusal
fails it with PERMISSION_DENIED, the message saying what was refused (``User:alice may
not Delete Group:g1``) and the ``rill-error`` trailer naming the rill error code
(``GROUP_AUTHORIZATION_FAILED``); a listing's response is trimmed to what the caller
may describe. Without ``authorize`` nothing is checked, at no cost. The health and
reflection services are not intercepted. A password check (a PBKDF2 unless the same
credentials succeeded a moment ago) runs on the sync server's worker thread; grpc.aio's
interceptor awaits it from ``submit_check``'s threads, never on its event loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import hmac
from concurrent.futures import Future
from dataclasses import dataclass
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grpc
import structlog

from rill.client.grpc_channels import BEARER, ERROR_TRAILER
from rill.client.security import principal as principals
from rill.client.security.call_credentials import AUTHORIZATION, decode_basic
from rill.coordinator.grpc_authorization import Authorize, CallAuthorizer

__all__ = ["AioAuthInterceptor", "AuthInterceptor", "CallAuthenticator", "ServerSecurity", "Unauthenticated",
           "called_over_tls", "caller"]

log = structlog.get_logger(__name__)
audit = structlog.get_logger("rill.audit")

_principal: contextvars.ContextVar[str] = contextvars.ContextVar("rill_principal", default=principals.ANONYMOUS)
_host: contextvars.ContextVar[str] = contextvars.ContextVar("rill_peer_host", default="")
_tls: contextvars.ContextVar[bool] = contextvars.ContextVar("rill_call_over_tls", default=False)
_RILL_SERVICES = ("/rill.v1.",)


@dataclass
class ServerSecurity:
    """How a gRPC server authenticates and authorizes: the call authenticator, its TLS port
    (``tls_address``, with ``credentials`` from ``grpc.ssl_server_credentials``; None: no TLS port;
    ``tls_port`` is set once bound), and ``authorize(principal, host, operation, resource_type, name)``
    (BrokerSecurity.authorize; None: no authorization, every call allowed)."""

    authenticator: CallAuthenticator
    tls_address: str | None = None
    credentials: Any = None
    tls_port: int = -1
    authorize: Authorize | None = None

    def call_authorizer(self) -> CallAuthorizer | None:
        """What the interceptors check calls with (None without ``authorize``)."""
        return None if self.authorize is None else CallAuthorizer(self.authorize)


class Unauthenticated(Exception):
    """The call's credentials are wrong (the message says why, without telling a user apart)."""


def caller() -> tuple[str, str]:
    """``(principal, host)`` of the call being served (ANONYMOUS and "" outside one)."""
    return _principal.get(), _host.get()


def called_over_tls() -> bool:
    """Whether the call being served came in on the TLS gRPC port (False outside one): an answer naming
    another broker's gRPC port names its TLS one then (rill.broker.cluster.controller_refusal)."""
    return _tls.get()


def _over_tls(auth_context: Mapping[str, Any] | None) -> bool:
    return list((auth_context or {}).get("transport_security_type") or ()) == [b"ssl"]


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
    user store, so every credential is refused); ``submit_check`` does the same on threads
    of its own (a done future when it costs nothing), for :meth:`principal_async`.
    ``broker_token()`` is the token brokers show each other, read at every call (a
    cluster's arrives from ZooKeeper after the server started; None, or a function
    returning None: no call is the brokers').
    """

    def __init__(self, check_password: Callable[[str, str], bool] | None,
                 broker_token: Callable[[], str | None] | None = None,
                 submit_check: Callable[[str, str], Future[bool]] | None = None) -> None:
        self.check_password = check_password
        self.broker_token = broker_token
        self.submit_check = submit_check

    def principal(self, metadata: Sequence[tuple[str, Any]] | None, auth_context: Mapping[str, Any] | None) -> str:
        """Raises Unauthenticated for credentials that are malformed or wrong."""
        found = self._identify(metadata, auth_context)
        if isinstance(found, str):
            return found
        user, password = found
        return _checked(user, self.check_password is not None and self.check_password(user, password))

    async def principal_async(self, metadata: Sequence[tuple[str, Any]] | None,
                              auth_context: Mapping[str, Any] | None) -> str:
        """:meth:`principal`, its password check awaited from ``submit_check`` (off the event loop)."""
        found = self._identify(metadata, auth_context)
        if isinstance(found, str):
            return found
        user, password = found
        if self.check_password is None:
            return _checked(user, False)
        if self.submit_check is None:
            return _checked(user, self.check_password(user, password))
        check = self.submit_check(user, password)
        if not check.done():
            try:
                await asyncio.wrap_future(check)
            except asyncio.CancelledError:
                if not check.cancelled():
                    raise  # the call itself was cancelled
        if check.cancelled():  # queued when the broker began to stop
            raise Unauthenticated("the broker is stopping")
        return _checked(user, check.result())

    def _identify(self, metadata: Sequence[tuple[str, Any]] | None,
                  auth_context: Mapping[str, Any] | None) -> str | tuple[str, str]:
        """The principal, or the (user, password) still to check; raises Unauthenticated."""
        value = next((v for k, v in metadata or () if k == AUTHORIZATION), None)
        if value is not None:
            text = str(value)
            if text.startswith(BEARER):
                return self._broker(text[len(BEARER):])
            try:
                return decode_basic(text)
            except ValueError as exc:
                raise Unauthenticated(f"malformed credentials: {exc}") from None
        names = (auth_context or {}).get("x509_common_name") or []
        if names:
            name = names[0]
            return principals.user(name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name))
        return principals.ANONYMOUS

    def _broker(self, token: str) -> str:
        """principal.BROKER for the cluster's token (compared in constant time); raises Unauthenticated."""
        expected = self.broker_token() if self.broker_token is not None else None
        if not expected or not hmac.compare_digest(token.strip().encode(), expected.encode()):
            raise Unauthenticated("authentication failed: invalid broker token")
        return principals.BROKER


def _checked(user: str, right: bool) -> str:
    if not right:
        raise Unauthenticated("authentication failed: invalid user name or password")
    return principals.user(user)


def _rill_method(method: str) -> bool:
    return method.startswith(_RILL_SERVICES)


class AuthInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
    """The sync server's: authenticates and authorizes each call to rill's services on the worker thread
    that serves it (the interceptor itself runs on gRPC's polling thread: it only wraps)."""

    def __init__(self, security: ServerSecurity) -> None:
        self.authenticator = security.authenticator
        self.authorizer = security.call_authorizer()

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        handler = continuation(details)
        if handler is None or handler.unary_unary is None or not _rill_method(details.method):
            return handler
        inner, method = handler.unary_unary, details.method
        authenticator, authorizer = self.authenticator, self.authorizer
        rule = authorizer.rule(method) if authorizer is not None else None
        metadata = tuple(details.invocation_metadata or ())

        def wrapper(request: Any, context: grpc.ServicerContext) -> Any:
            host, auth = peer_host(context.peer()), context.auth_context()
            try:
                who = authenticator.principal(metadata, auth)
            except Unauthenticated as exc:
                audit.warning("audit.authentication_failed", peer=host, rpc=method, reason=str(exc))
                context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
            if authorizer is not None:
                refusal = authorizer.refusal(method, rule, who, host, request)
                if refusal is not None:
                    # set_trailing_metadata, then abort: abort_with_status would drop the trailer
                    context.set_trailing_metadata(((ERROR_TRAILER, refusal.code),))
                    context.abort(grpc.StatusCode.PERMISSION_DENIED, refusal.message)
            tokens = _principal.set(who), _host.set(host), _tls.set(_over_tls(auth))
            try:
                response = inner(request, context)
            finally:
                _principal.reset(tokens[0])
                _host.reset(tokens[1])
                _tls.reset(tokens[2])
            return response if authorizer is None else authorizer.trim(rule, who, host, request, response)

        return grpc.unary_unary_rpc_method_handler(wrapper, request_deserializer=handler.request_deserializer,
                                                   response_serializer=handler.response_serializer)


class AioAuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """The grpc.aio server's: the same, in the call's task (its context reaches the worker threads).
    The checks run on the event loop (the authorizer answers from memory), but for a password's."""

    def __init__(self, security: ServerSecurity) -> None:
        self.authenticator = security.authenticator
        self.authorizer = security.call_authorizer()
        self._wrapped: dict[str, Any] = {}

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        method = details.method
        wrapped = self._wrapped.get(method)
        if wrapped is not None:
            return wrapped
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None or not _rill_method(method):
            return handler
        inner, authenticator, authorizer = handler.unary_unary, self.authenticator, self.authorizer
        rule = authorizer.rule(method) if authorizer is not None else None

        async def wrapper(request: Any, context: Any) -> Any:
            host, auth = peer_host(context.peer()), context.auth_context()
            try:
                who = await authenticator.principal_async(context.invocation_metadata(), auth)
            except Unauthenticated as exc:
                audit.warning("audit.authentication_failed", peer=host, rpc=method, reason=str(exc))
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
            if authorizer is not None:
                refusal = authorizer.refusal(method, rule, who, host, request)
                if refusal is not None:
                    context.set_trailing_metadata(((ERROR_TRAILER, refusal.code),))
                    await context.abort(grpc.StatusCode.PERMISSION_DENIED, refusal.message)
            _principal.set(who)
            _host.set(host)
            _tls.set(_over_tls(auth))
            response = await inner(request, context)
            return response if authorizer is None else authorizer.trim(rule, who, host, request, response)

        wrapped = self._wrapped[method] = grpc.unary_unary_rpc_method_handler(
            wrapper, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer)
        return wrapped
