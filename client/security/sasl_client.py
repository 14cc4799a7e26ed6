"""The client's side of SASL on the data plane, sans-IO: request frames out, response bodies in.

    session = SaslClientSession("SCRAM-SHA-256", "alice", "alice-secret")
    frame = session.first_frame()              # SASL_HANDSHAKE
    while frame is not None:
        send(frame)
        frame = session.on_response(read_response_body())

PLAIN takes one SASL_AUTHENTICATE, SCRAM two (and the client checks the server's
signature: a broker that does not know the password cannot pretend to). Errors raise
the broker's error (UnsupportedSaslMechanism naming what the listener offers,
SaslAuthenticationFailed with the broker's message) or
:class:`~rill.client.security.scram.ScramError` for a server that fails SCRAM's checks.
"""

from __future__ import annotations

from rill.client.errors import ErrorCode, UnsupportedSaslMechanism, error_for_code
from rill.client.protocol import sasl_requests as sasl
from rill.client.security.plain import plain_message
from rill.client.security.scram import ScramClient

__all__ = ["SaslClientSession"]


class SaslClientSession:
    """One SASL exchange for one connection."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.mechanism = mechanism
        self.username = username
        self._password = password
        self._scram: ScramClient | None = None
        self._step = 0  # responses handled so far
        self.done = False

    def first_frame(self) -> bytes:
        return sasl.encode_sasl_handshake(self.mechanism)

    def on_response(self, body: memoryview | bytes) -> bytes | None:
        """Handle the next response; return the next request frame, or None when authenticated."""
        self._step += 1
        if self._step == 1:
            error, offered = sasl.decode_sasl_handshake_response(body)
            if error == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
                raise UnsupportedSaslMechanism(f"the listener does not offer {self.mechanism}; it offers "
                                               f"{', '.join(offered) or 'none'} (sasl.mechanism)")
            if error:
                raise error_for_code(error)
            return sasl.encode_sasl_authenticate(self._first_token())
        error, message, token, _ = sasl.decode_sasl_authenticate_response(body)
        if error:
            raise error_for_code(error, message)
        if self._scram is None:  # PLAIN: one round
            self.done = True
            return None
        if self._step == 2:
            return sasl.encode_sasl_authenticate(self._scram.final_message(token))
        self._scram.verify_server_final(token)
        self.done = True
        return None

    def _first_token(self) -> bytes:
        if self.mechanism == "PLAIN":
            return plain_message(self.username, self._password)
        self._scram = ScramClient(self.mechanism, self.username, self._password)
        return self._scram.first_message()
