"""SASL_HANDSHAKE (11) and SASL_AUTHENTICATE (12): authentication on a SASL listener, as Kafka frames it.

Kafka's SaslHandshake (KIP-43) and SaslAuthenticate (KIP-152) in rill's framing
(docs/protocol.md gives the layouts):

- SASL_HANDSHAKE: ``MECHANISM string16``. Response: ``error int16`` (0, or
  UnsupportedSaslMechanism), then ``COUNT int16`` and the listener's mechanisms, each a
  ``string16``.
- SASL_AUTHENTICATE: ``AUTH_BYTES bytes32`` (an ``int32`` length, then the bytes: one
  token of the mechanism's exchange). Response: ``error int16`` (0, or
  SaslAuthenticationFailed / IllegalSaslState), ``ERROR_MESSAGE string16``,
  ``AUTH_BYTES bytes32`` (the server's token) and ``SESSION_LIFETIME_MS int64`` (0: the
  session lasts as long as the connection).

On a SASL listener a client sends SASL_HANDSHAKE, then SASL_AUTHENTICATE until the
mechanism is done (PLAIN: once; SCRAM: twice), and only then other requests. A failure
is answered and the connection closed.
"""

from __future__ import annotations

from typing import NamedTuple

from rill.client.protocol.framing import INT16, INT32, INT64, DecodeError, Reader, string16
from rill.client.protocol.fetch_response import response_header

__all__ = ["SaslAuthenticateRequest", "SaslHandshakeRequest", "decode_sasl_authenticate",
           "decode_sasl_authenticate_response", "decode_sasl_handshake", "decode_sasl_handshake_response",
           "encode_sasl_authenticate", "encode_sasl_authenticate_response", "encode_sasl_handshake",
           "encode_sasl_handshake_response", "MAX_AUTH_BYTES", "SASL_AUTHENTICATE", "SASL_HANDSHAKE"]

SASL_HANDSHAKE = 11
SASL_AUTHENTICATE = 12
MAX_AUTH_BYTES = 64 * 1024  # a token of PLAIN or SCRAM is a few hundred bytes


class SaslHandshakeRequest(NamedTuple):
    mechanism: str


class SaslAuthenticateRequest(NamedTuple):
    auth_bytes: bytes


def _bytes32(r: Reader) -> bytes:
    n = r.int32()
    if not 0 <= n <= MAX_AUTH_BYTES:
        raise DecodeError(f"SASL token of {n} bytes (at most {MAX_AUTH_BYTES})")
    return bytes(r.raw(n))


def decode_sasl_handshake(r: Reader) -> SaslHandshakeRequest:
    return SaslHandshakeRequest(r.string16())


def decode_sasl_authenticate(r: Reader) -> SaslAuthenticateRequest:
    return SaslAuthenticateRequest(_bytes32(r))


def _frame(kind: int, body: bytes) -> bytes:
    return INT32.pack(2 + len(body)) + INT16.pack(kind) + body


def encode_sasl_handshake(mechanism: str) -> bytes:
    return _frame(SASL_HANDSHAKE, string16(mechanism))


def encode_sasl_authenticate(auth_bytes: bytes) -> bytes:
    return _frame(SASL_AUTHENTICATE, INT32.pack(len(auth_bytes)) + auth_bytes)


def encode_sasl_handshake_response(error: int, mechanisms: list[str]) -> bytes:
    body = INT16.pack(len(mechanisms)) + b"".join(string16(m) for m in mechanisms)
    return response_header(error, len(body)) + body


def encode_sasl_authenticate_response(error: int, message: str = "", auth_bytes: bytes = b"",
                                      session_lifetime_ms: int = 0) -> bytes:
    body = (string16(message[:1000]) + INT32.pack(len(auth_bytes)) + auth_bytes
            + INT64.pack(session_lifetime_ms))
    return response_header(error, len(body)) + body


def decode_sasl_handshake_response(body: memoryview | bytes) -> tuple[int, list[str]]:
    r = Reader(body)
    error = r.int16()
    mechanisms = [r.string16() for _ in range(r.count(2))]
    r.expect_end()
    return error, mechanisms


def decode_sasl_authenticate_response(body: memoryview | bytes) -> tuple[int, str, bytes, int]:
    """``(error, error message, server token, session lifetime ms)``. A response that is only an
    error code (IllegalSaslState, answered to any request type) gives empty fields."""
    r = Reader(body)
    error = r.int16()
    if error and r.remaining() == 0:
        return error, "", b"", 0
    message = r.string16()
    token = _bytes32(r)
    lifetime = r.int64()
    r.expect_end()
    return error, message, token, lifetime
