"""SASL PLAIN (RFC 4616), sans-IO, checked against the users' SCRAM-SHA-256 credentials.

PLAIN is one client message, ``authzid NUL authcid NUL passwd`` in UTF-8, that carries the
password itself, so it belongs on TLS listeners only. There is no second store of
passwords: the server checks the password against the user's SCRAM-SHA-256 credential
(:meth:`~rill.client.security.scram.ScramCredential.verify_password`), so ``rill users add``
serves both mechanisms.

That check runs PBKDF2 (a few milliseconds at 8192 iterations), on purpose. A gRPC call that
carries a user name and password would pay it on every call, so :class:`PasswordCache`
remembers recent successful checks for a while. Failed checks are never cached, and a check
of an unknown user runs PBKDF2 against a throwaway credential, so an unknown user and a wrong
password take about as long and give the same :class:`PlainAuthenticationError`.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from rill.client.errors import RillError
from rill.client.security.scram import (DEFAULT_ITERATIONS, MAX_MESSAGE_BYTES, MAX_NAME_LENGTH, ScramCredential,
                                        make_credential)

__all__ = ["PLAIN", "PasswordCache", "PlainAuthenticationError", "PlainError", "authenticate_plain",
           "check_password", "parse_plain", "plain_message"]

PLAIN = "PLAIN"
Lookup = Callable[[str], ScramCredential | None]


class PlainError(RillError, ValueError):
    """A PLAIN message that is malformed, too large, or names another identity."""


class PlainAuthenticationError(PlainError):
    """Wrong password or unknown user (never saying which)."""

    def __init__(self, message: str = "authentication failed: invalid user name or password") -> None:
        super().__init__(message)


def _check(username: str, password: str) -> None:
    if not 1 <= len(username) <= MAX_NAME_LENGTH or not username.isprintable():
        raise PlainError(f"a user name is 1..{MAX_NAME_LENGTH} printable characters")
    if not password or "\0" in password:
        raise PlainError("a password is not empty and has no NUL character")


def plain_message(username: str, password: str) -> bytes:
    """The client's one message, ``\\0<user>\\0<password>`` (no authorization id).

    Raises:
        PlainError: an empty, unprintable or over-long name, an empty password, a NUL in either,
            or a message over 1 KiB.
    """
    _check(username, password)
    message = f"\0{username}\0{password}".encode("utf-8")
    if len(message) > MAX_MESSAGE_BYTES:
        raise PlainError(f"a PLAIN message is at most {MAX_MESSAGE_BYTES} bytes")
    return message


def parse_plain(message: bytes) -> tuple[str, str]:
    """``(username, password)`` from a client's message.

    Raises:
        PlainError: over 1 KiB, not UTF-8, not three NUL-separated fields, an empty name or
            password, or an authorization id other than empty or the user's own name.
    """
    if len(message) > MAX_MESSAGE_BYTES:
        raise PlainError(f"the PLAIN message is {len(message)} bytes, over {MAX_MESSAGE_BYTES}")
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise PlainError("the PLAIN message is not UTF-8") from None
    parts = text.split("\0")
    if len(parts) != 3:
        raise PlainError("a PLAIN message is authzid NUL user NUL password")
    authzid, username, password = parts
    _check(username, password)
    if authzid and authzid != username:
        raise PlainError("an authorization id different from the user name is not supported")
    return username, password


class PasswordCache:
    """Recent successful password checks, so that a repeated check skips PBKDF2. Thread-safe.

    An entry is keyed by the user name and an HMAC of the password under a random key made
    for this cache (the password itself is not kept), and holds the credential it was
    checked against: when the stored credential changes (a new password, a deleted user) the
    entry no longer matches and the next check runs PBKDF2 again. Entries expire ``ttl_s``
    after the check; beyond ``max_entries`` the least recently used goes.
    """

    def __init__(self, max_entries: int = 1024, ttl_s: float = 300.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_entries < 1 or ttl_s <= 0:
            raise ValueError("max_entries must be >= 1 and ttl_s > 0")
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self._clock = clock
        self._key = secrets.token_bytes(32)
        self._entries: OrderedDict[tuple[str, bytes], tuple[float, ScramCredential]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def _digest(self, username: str, password: str) -> bytes:
        return hmac.new(self._key, f"{username}\0{password}".encode("utf-8"), hashlib.sha256).digest()

    def remembered(self, username: str, password: str, credential: ScramCredential | None) -> bool:
        """Whether this name and password succeeded against ``credential`` within ``ttl_s`` (no PBKDF2;
        a stale entry is dropped)."""
        key = (username, self._digest(username, password))
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] > self._clock() and credential is not None and entry[1] == credential:
                self._entries.move_to_end(key)
                return True
            if entry is not None:
                del self._entries[key]
        return False

    def verify(self, username: str, password: str, credential: ScramCredential | None) -> bool:
        """Whether ``password`` is the one ``credential`` was made from (None: an unknown user, False).

        A cached success for the same name, password and credential answers at once;
        otherwise PBKDF2 runs (against a throwaway credential for an unknown user, to take as long).
        """
        if self.remembered(username, password, credential):
            return True
        if not _verify(password, credential) or credential is None:
            return False
        key = (username, self._digest(username, password))
        with self._lock:
            self._entries[key] = (self._clock() + self.ttl_s, credential)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return True

    def invalidate(self, username: str | None = None) -> None:
        """Forget the entries of ``username`` (None: every entry)."""
        with self._lock:
            for key in [k for k in self._entries if username is None or k[0] == username]:
                del self._entries[key]


@functools.cache
def _unknown_user_credential() -> ScramCredential:
    """A credential of a random password, made once: checking an unknown user's password costs the same."""
    return make_credential("SCRAM-SHA-256", secrets.token_urlsafe(32), DEFAULT_ITERATIONS)


def _verify(password: str, credential: ScramCredential | None) -> bool:
    """One PBKDF2 run, also for an unknown user (None), which is always False."""
    if credential is None:
        _unknown_user_credential().verify_password(password)
        return False
    return credential.verify_password(password)


def check_password(username: str, password: str, lookup: Lookup, cache: PasswordCache | None = None) -> bool:
    """Whether ``password`` is ``username``'s, by the user's SCRAM-SHA-256 credential from ``lookup``.

    An unknown user is False after as much work as a wrong password. ``cache`` (shared by
    the callers of one server) skips PBKDF2 for a recent success.
    """
    credential = lookup(username)
    return cache.verify(username, password, credential) if cache is not None else _verify(password, credential)


def authenticate_plain(message: bytes, lookup: Lookup, cache: PasswordCache | None = None) -> str:
    """The server's side of PLAIN: the authenticated user name.

    ``lookup(user)`` returns the user's SCRAM-SHA-256 credential or None.

    Raises:
        PlainError: a malformed message (:func:`parse_plain`).
        PlainAuthenticationError: a wrong password or an unknown user, alike.
    """
    username, password = parse_plain(message)
    if not check_password(username, password, lookup, cache):
        raise PlainAuthenticationError()
    return username
