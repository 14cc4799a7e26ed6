"""The broker's side of SASL on the data plane: one exchange per connection on a SASL listener.

A connection accepted on a SASL_PLAINTEXT or SASL_SSL listener gets a
:class:`SaslAuthenticator`; while it is set, the request handlers send every request to
it (rill.broker.dataplane.handlers). It takes, in order:

1. SASL_HANDSHAKE with a mechanism the listener offers (``sasl.enabled.mechanisms``);
   anything else is answered UnsupportedSaslMechanism, naming those it offers.
2. SASL_AUTHENTICATE with the mechanism's tokens: PLAIN's one message (the password
   is checked against the user's SCRAM credential: one store for both), or SCRAM's two
   (the broker never sees the password).

Once authenticated, the connection's principal is ``User:<name>`` and the connection
serves requests as any other. A failure is answered SaslAuthenticationFailed with a
message that does not say whether the user exists, then the connection is closed; a
request out of order (anything before authentication, a second handshake) is answered
IllegalSaslState and the connection closed. A SASL request on a connection that needs
none is refused the same way (:func:`refuse_out_of_order`).

Runs on the event-loop thread. SCRAM costs the broker two HMACs. PLAIN costs a PBKDF2 of
the credential's iterations (a few milliseconds) unless the same password succeeded a
moment ago: that runs on rill.broker.security.password_checks' threads while the
connection holds its SASL_AUTHENTICATE (a :class:`Deferred`, as a topic being created),
so a client trying passwords never stalls the loop. SCRAM is still the cheaper choice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import structlog

from rill.broker.dataplane.server_connection import Connection, Deferred, Slot
from rill.broker.security.password_checks import PasswordChecks
from rill.client.errors import ErrorCode
from rill.client.protocol import requests as rq
from rill.client.protocol import sasl_requests as sasl
from rill.client.security import principal
from rill.client.security.plain import parse_plain
from rill.client.security.scram import MECHANISMS as SCRAM_MECHANISMS
from rill.client.security.scram import ScramError, ScramServer

__all__ = ["SaslAuthenticator", "refuse_out_of_order"]

log = structlog.get_logger(__name__)
audit = structlog.get_logger("rill.audit")

CredentialLookup = Callable[[str, str], Any]  # (user, mechanism) -> its ScramCredential, or None
PLAIN_CHECK = "sasl-plain-check"  # the key of a PLAIN check's deferral


def refuse_out_of_order(conn: Connection, kind: int, reason: str) -> Slot:
    """Answer IllegalSaslState (only the error code: every response starts with it) and close."""
    log.info("sasl.illegal_state", peer=conn.ip, listener=conn.listener, request_type=kind, reason=reason)
    conn.closing = True
    return Slot([rq.response_header(int(ErrorCode.ILLEGAL_SASL_STATE), 0)])


class SaslAuthenticator:
    """One connection's SASL exchange (see the module docstring)."""

    def __init__(self, mechanisms: Sequence[str], lookup: CredentialLookup, mock_secret: bytes,
                 passwords: PasswordChecks) -> None:
        self.mechanisms = list(mechanisms)
        self._lookup = lookup
        self._mock_secret = mock_secret
        self._passwords = passwords
        self.mechanism: str | None = None
        self._scram: ScramServer | None = None

    def handle(self, conn: Connection, kind: int, request: Any) -> Slot:
        if kind == rq.RequestType.SASL_HANDSHAKE and self.mechanism is None:
            return self._handshake(conn, request.mechanism)
        if kind == rq.RequestType.SASL_AUTHENTICATE and self.mechanism is not None:
            return self._authenticate(conn, request.auth_bytes)
        return refuse_out_of_order(conn, kind, "before SASL authentication" if self.mechanism is None
                                   else "a request other than SASL_AUTHENTICATE during SASL authentication")

    def _handshake(self, conn: Connection, mechanism: str) -> Slot:
        if mechanism not in self.mechanisms:
            log.info("sasl.unsupported_mechanism", peer=conn.ip, listener=conn.listener, mechanism=mechanism,
                     enabled=self.mechanisms)
            conn.closing = True
            return Slot([sasl.encode_sasl_handshake_response(int(ErrorCode.UNSUPPORTED_SASL_MECHANISM),
                                                             self.mechanisms)])
        self.mechanism = mechanism
        if mechanism in SCRAM_MECHANISMS:
            self._scram = ScramServer(mechanism, lambda user: self._lookup(user, mechanism), self._mock_secret)
        return Slot([sasl.encode_sasl_handshake_response(0, self.mechanisms)])

    def _authenticate(self, conn: Connection, token: bytes) -> Slot:
        if self._scram is None:
            return self._plain(conn, token)
        try:
            answer = self._scram.step(token)
        except ScramError as exc:
            return self._failed(conn, self._scram.username or "", str(exc))
        if self._scram.done:
            self._succeeded(conn, self._scram.username or "")
        return Slot([sasl.encode_sasl_authenticate_response(0, "", answer)])

    def _plain(self, conn: Connection, token: bytes) -> Slot:
        try:
            user, password = parse_plain(token)
        except ValueError as exc:
            return self._failed(conn, "", f"malformed PLAIN message: {exc}")
        # PLAIN's password is the SCRAM-SHA-256 one; an unknown user costs a check against a fake
        # credential too (it answers no faster)
        check = next((d.future for d in conn.deferrals if d.key == PLAIN_CHECK), None)
        if check is None:
            check = self._passwords.submit(user, password)
            if not check.done():
                raise Deferred(check, PLAIN_CHECK)  # handled again once checked, nothing changed before
        if check.cancelled():
            return self._failed(conn, user, "the broker is stopping")
        if not check.result():
            unknown = self._lookup(user, "SCRAM-SHA-256") is None
            return self._failed(conn, user, "unknown user" if unknown else "wrong password")
        self._succeeded(conn, user)
        return Slot([sasl.encode_sasl_authenticate_response(0)])

    def _succeeded(self, conn: Connection, user: str) -> None:
        conn.principal = principal.user(user)
        conn.authenticator = None
        conn.setup_deadline = None  # (on TLS the handshake is done: no frame is read before it)
        conn.decoder.max_frame_size = conn.max_request_size
        log.info("sasl.authenticated", peer=conn.ip, listener=conn.listener, principal=conn.principal,
                 mechanism=self.mechanism)

    def _failed(self, conn: Connection, user: str, why: str) -> Slot:
        audit.warning("audit.authentication_failed", principal=principal.user(user) if user else None,
                      peer=conn.ip, listener=conn.listener, mechanism=self.mechanism, reason=why)
        conn.closing = True
        message = f"Authentication failed: invalid credentials with SASL mechanism {self.mechanism}"
        return Slot([sasl.encode_sasl_authenticate_response(int(ErrorCode.SASL_AUTHENTICATION_FAILED), message)])
