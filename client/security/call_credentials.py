"""Credentials on a gRPC call: the SASL user and password in the call's metadata.

gRPC has no SASL, so a client with SASL settings (``security.protocol`` SASL_PLAINTEXT or
SASL_SSL) sends its user and password with every call, in the standard
``authorization`` header with HTTP's Basic scheme (RFC 7617): ``Basic
base64(user:password)``. The broker checks them against the same store as the data
plane's SASL (the user's SCRAM-SHA-256 credential; rill.client.security.plain's
PasswordCache spares a PBKDF2 per call), so a client has one principal, ``User:<user>``,
on both planes. Over plaintext gRPC the password crosses the network as it is, as with
SASL PLAIN: use the TLS port (``grpc.ssl.port``).
"""

from __future__ import annotations

import base64
import binascii

__all__ = ["AUTHORIZATION", "decode_basic", "encode_basic"]

AUTHORIZATION = "authorization"
_SCHEME = "Basic "
MAX_HEADER = 2048


def encode_basic(username: str, password: str) -> str:
    """The ``authorization`` metadata value for ``username`` and ``password``."""
    if ":" in username:
        raise ValueError("a user name for gRPC credentials cannot contain ':'")
    return _SCHEME + base64.b64encode(f"{username}:{password}".encode("utf-8")).decode("ascii")


def decode_basic(value: str) -> tuple[str, str]:
    """``(user, password)`` from an ``authorization`` value. Raises ValueError for anything else."""
    if len(value) > MAX_HEADER or not value.startswith(_SCHEME):
        raise ValueError("expected 'Basic <base64 of user:password>'")
    try:
        text = base64.b64decode(value[len(_SCHEME):].strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ValueError("the credentials are not base64 of UTF-8 'user:password'") from exc
    user, sep, password = text.partition(":")
    if not sep or not user:
        raise ValueError("expected 'user:password'")
    return user, password
