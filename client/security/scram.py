"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), sans-IO: messages in, messages out.

Neither side owns a socket: the transport carries each message (one SaslAuthenticate each,
Kafka's framing) and calls :meth:`ScramClient.final_message` or :meth:`ScramServer.step` with
what arrived. The exchange, with the keys Kafka's ``ScramFormatter`` derives::

    client-first  n,,n=<user>,r=<cnonce>
    server-first  r=<cnonce><snonce>,s=<b64 salt>,i=<iterations>
    client-final  c=biws,r=<cnonce><snonce>,p=<b64 ClientProof>
    server-final  v=<b64 ServerSignature>            (a failed proof: e=invalid-proof)

    SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations)
    ClientKey = HMAC(SaltedPassword, "Client Key")    StoredKey = H(ClientKey)
    ServerKey = HMAC(SaltedPassword, "Server Key")
    AuthMessage = client-first-bare "," server-first "," client-final-without-proof
    ClientProof = ClientKey XOR HMAC(StoredKey, AuthMessage)
    ServerSignature = HMAC(ServerKey, AuthMessage)

The server keeps only a :class:`ScramCredential` (salt, StoredKey, ServerKey, iterations),
never the password. The client checks the server's signature too: a server without the
credential cannot pretend to have accepted it.

Choices, as Kafka makes them:

- Passwords and names are UTF-8 without SASLprep (Kafka's ``ScramFormatter.normalize``), so a
  credential made by Kafka's tools verifies here and the other way round.
- Iterations are refused below 4096 (Kafka's minimum and RFC 7677's) and above 16384 (Kafka's
  maximum; it also keeps a hostile server from making a client spin).
- Only the GS2 headers ``n,,`` and ``y,,`` (no channel binding), or ``n,a=<user>,`` naming the
  user itself; extensions after the nonce are ignored (RFC 5802 5.1), ``m=`` is refused.
- An unknown user gets a salt derived from ``HMAC(mock_secret, mechanism:user)`` and the
  server's default iteration count, then fails at the proof on the same code path as a wrong
  password: the client cannot tell the two apart, by the answer or by its timing. Brokers of
  a cluster should share one ``mock_secret`` and keep it across restarts, or the fake salt
  of a name would change where a real one does not.

Errors: :class:`ScramError` for anything malformed or out of order (its ``server_final`` is
the ``e=...`` message RFC 5802 would send), :class:`ScramAuthenticationError` for a failed
proof or a wrong server signature. A ScramServer or ScramClient is single-use and not
thread-safe: one exchange, one thread.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

from rill.client.errors import RillError

__all__ = ["DEFAULT_ITERATIONS", "MAX_ITERATIONS", "MAX_MESSAGE_BYTES", "MAX_NAME_LENGTH", "MECHANISMS",
           "MIN_ITERATIONS", "ScramAuthenticationError", "ScramClient", "ScramCredential", "ScramError",
           "ScramServer", "make_credential"]

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 8192
SALT_BYTES = 32
MAX_MESSAGE_BYTES = 1024
MAX_NAME_LENGTH = 255
_GS2_HEADERS = ("n,,", "y,,")
_BAD_ESCAPE = re.compile("=(?!2C|3D)")


class ScramError(RillError, ValueError):
    """A SCRAM message that is malformed, too large, out of order, or refused.

    ``server_final`` is the RFC 5802 error message a server may answer with (``e=...``).
    """

    def __init__(self, message: str, server_error: str = "other-error") -> None:
        super().__init__(message)
        self.server_final = f"e={server_error}".encode()


class ScramAuthenticationError(ScramError):
    """Authentication failed: on the server a wrong password or an unknown user (never saying
    which), on the client a server that refused or could not prove it holds the credential."""

    def __init__(self, message: str = "authentication failed: invalid user name or password") -> None:
        super().__init__(message, "invalid-proof")


def _hash_name(mechanism: str) -> str:
    try:
        return _HASHES[mechanism]
    except KeyError:
        raise ScramError(f"unsupported SCRAM mechanism {mechanism!r}; supported: {', '.join(MECHANISMS)}") from None


def _check_iterations(iterations: int) -> None:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ScramError(f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}, got {iterations}")


def _hmac(hash_name: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hash_name).digest()


def _keys(hash_name: str, password: str, salt: bytes, iterations: int) -> tuple[bytes, bytes, bytes]:
    """``(ClientKey, StoredKey, ServerKey)`` of a password: the costly PBKDF2 runs here."""
    salted = hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)
    client_key = _hmac(hash_name, salted, b"Client Key")
    return client_key, hashlib.new(hash_name, client_key).digest(), _hmac(hash_name, salted, b"Server Key")


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ScramError(f"{what} is not base64", "invalid-encoding") from None


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a server stores for one user and mechanism: never the password.

    ``salt`` and ``iterations`` let the client derive its keys; ``stored_key`` checks its
    proof; ``server_key`` signs the server's answer. The keys are left out of ``repr``.
    """

    mechanism: str
    salt: bytes
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int

    def to_text(self) -> str:
        """Kafka's storage form (``ScramCredentialUtils``):
        ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``."""
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},server_key={_b64(self.server_key)},"
                f"iterations={self.iterations}")

    @classmethod
    def from_text(cls, mechanism: str, text: str) -> ScramCredential:
        """Parse :meth:`to_text`'s form (fields in any order).

        Raises:
            ScramError: an unknown mechanism, a missing, repeated or non-base64 field, or
                iterations outside 4096..16384.
        """
        _hash_name(mechanism)
        fields: dict[str, str] = {}
        for part in text.split(","):
            name, sep, value = part.partition("=")
            if not sep or name in fields:
                raise ScramError(f"malformed {mechanism} credential: {part[:20]!r}")
            fields[name] = value
        if set(fields) != {"salt", "stored_key", "server_key", "iterations"}:
            raise ScramError(f"a {mechanism} credential has salt, stored_key, server_key and iterations; "
                             f"got {', '.join(sorted(fields))}")
        if not fields["iterations"].isdigit():
            raise ScramError(f"{mechanism} credential: iterations is not a number")
        iterations = int(fields["iterations"])
        _check_iterations(iterations)
        return cls(mechanism, _unb64(fields["salt"], "salt"), _unb64(fields["stored_key"], "stored_key"),
                   _unb64(fields["server_key"], "server_key"), iterations)

    def verify_password(self, password: str) -> bool:
        """Whether ``password`` is this credential's (one PBKDF2 run; compared in constant time)."""
        _, stored_key, _ = _keys(_hash_name(self.mechanism), password, self.salt, self.iterations)
        return hmac.compare_digest(stored_key, self.stored_key)


def make_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    """The credential of ``password`` with a fresh random salt (or ``salt``, for tests).

    Raises:
        ScramError: an unknown mechanism, an empty password, or iterations outside 4096..16384.
    """
    hash_name = _hash_name(mechanism)
    _check_iterations(iterations)
    if not password:
        raise ScramError("the password is empty")
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    _, stored_key, server_key = _keys(hash_name, password, salt, iterations)
    return ScramCredential(mechanism, salt, stored_key, server_key, iterations)


def _encode_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _decode_name(text: str) -> str:
    """RFC 5802 saslname: ``=2C`` is ``,`` and ``=3D`` is ``=``; any other ``=`` is malformed."""
    if _BAD_ESCAPE.search(text):
        raise ScramError("malformed user name: '=' must be =2C or =3D", "invalid-username-encoding")
    name = text.replace("=2C", ",").replace("=3D", "=")
    if not 1 <= len(name) <= MAX_NAME_LENGTH or not name.isprintable():
        raise ScramError(f"a user name is 1..{MAX_NAME_LENGTH} printable characters", "invalid-username-encoding")
    return name


def _check_nonce(nonce: str) -> str:
    if not nonce or any(not 0x21 <= ord(c) <= 0x7E or c == "," for c in nonce):
        raise ScramError("a nonce is printable ASCII without ','", "invalid-encoding")
    return nonce


def _text(message: bytes, what: str) -> str:
    if len(message) > MAX_MESSAGE_BYTES:
        raise ScramError(f"the {what} is {len(message)} bytes, over {MAX_MESSAGE_BYTES}", "invalid-encoding")
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError(f"the {what} is not UTF-8", "invalid-encoding") from None


def _attributes(text: str, names: str, what: str) -> list[str]:
    """The values of the leading attributes ``names`` (one letter each, in that order); any
    attributes after them (extensions) must be ``<letter>=<value>`` and are ignored."""
    parts = text.split(",")
    if len(parts) < len(names) or any(len(p) < 2 or not p[0].isalpha() or p[1] != "=" for p in parts[len(names):]):
        raise ScramError(f"malformed {what}", "invalid-encoding")
    values = []
    for name, part in zip(names, parts):
        if not part.startswith(name + "="):
            raise ScramError(f"malformed {what}: expected {name}=", "invalid-encoding")
        values.append(part[2:])
    return values


class ScramClient:
    """The client side of one exchange: :meth:`first_message`, :meth:`final_message`,
    :meth:`verify_server_final`, in that order, each once (``nonce`` fixes the client nonce for tests)."""

    def __init__(self, mechanism: str, username: str, password: str, *, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._hash = _hash_name(mechanism)
        if not username or not password:
            raise ScramError("a user name and a password are needed")
        self._password = password
        self._nonce = _check_nonce(secrets.token_urlsafe(24) if nonce is None else nonce)
        self._first_bare = f"n={_encode_name(username)},r={self._nonce}"
        self._step = 0
        self._server_signature = b""
        self.done = False

    def _advance(self, expected: int) -> None:
        if self._step != expected:
            raise ScramError("SCRAM client messages are first, final, then the server's final check, once each")
        self._step += 1

    def first_message(self) -> bytes:
        """``n,,n=<user>,r=<client nonce>``."""
        self._advance(0)
        return ("n,," + self._first_bare).encode("utf-8")

    def final_message(self, server_first: bytes) -> bytes:
        """The proof, from the server's salt, iterations and nonce (runs PBKDF2).

        Raises:
            ScramError: a malformed server-first, a nonce not extending the client's, or
                iterations outside 4096..16384.
        """
        self._advance(1)
        text = _text(server_first, "server-first message")
        if text.startswith("e="):
            raise ScramAuthenticationError(f"the server refused: {text[2:]}")
        if text.startswith("m="):
            raise ScramError("the server asked for a mandatory extension, which is not supported")
        nonce, salt_b64, iterations_text = _attributes(text, "rsi", "server-first message")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise ScramError("the server's nonce does not extend the client's")
        _check_nonce(nonce)
        if not iterations_text.isdigit():
            raise ScramError("the server's iteration count is not a number")
        iterations = int(iterations_text)
        _check_iterations(iterations)
        salt = _unb64(salt_b64, "salt")
        client_key, stored_key, server_key = _keys(self._hash, self._password, salt, iterations)
        without_proof = f"c={_b64(_GS2_HEADERS[0].encode())},r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode("utf-8")
        proof = _xor(client_key, _hmac(self._hash, stored_key, auth_message))
        self._server_signature = _hmac(self._hash, server_key, auth_message)
        return f"{without_proof},p={_b64(proof)}".encode("utf-8")

    def verify_server_final(self, server_final: bytes) -> None:
        """Check the server's signature: it proves the server holds this user's credential.

        Raises:
            ScramAuthenticationError: the server answered ``e=...`` or signed wrongly.
            ScramError: a malformed message, or out of order.
        """
        self._advance(2)
        text = _text(server_final, "server-final message")
        if text.startswith("e="):
            raise ScramAuthenticationError(f"the server refused: {text[2:]}")
        (signature,) = _attributes(text, "v", "server-final message")
        if not hmac.compare_digest(_unb64(signature, "server signature"), self._server_signature):
            raise ScramAuthenticationError("the server's signature is wrong: it does not hold this user's credential")
        self.done = True


class ScramServer:
    """The server side of one exchange: :meth:`step` with the client-first, then the client-final.

    ``lookup(user)`` returns the user's credential for this mechanism or None. After the last
    step ``done`` is True and ``authenticated`` says whether the proof held (``username`` is
    the decoded name from the client-first). ``nonce`` (the server's part) and
    ``mock_iterations`` are for tests and for matching the cluster's usual iteration count.
    """

    def __init__(self, mechanism: str, lookup: Callable[[str], ScramCredential | None], mock_secret: bytes, *,
                 mock_iterations: int = DEFAULT_ITERATIONS, nonce: str | None = None) -> None:
        if len(mock_secret) < 16:
            raise ValueError("mock_secret must be at least 16 bytes")
        _check_iterations(mock_iterations)
        self.mechanism = mechanism
        self._hash = _hash_name(mechanism)
        self._lookup = lookup
        self._mock_secret = mock_secret
        self._mock_iterations = mock_iterations
        self._server_nonce = _check_nonce(secrets.token_urlsafe(24) if nonce is None else nonce)
        self.username: str | None = None
        self.done = False
        self.authenticated = False
        self._gs2 = ""
        self._nonce = ""
        self._auth_prefix = ""  # client-first-bare "," server-first
        self._credential: ScramCredential | None = None

    def step(self, client_message: bytes) -> bytes:
        """Answer the next client message: the server-first, then the server-final ``v=...``.

        Raises:
            ScramAuthenticationError: the proof failed (wrong password or unknown user, alike).
            ScramError: a malformed or oversized message, or a step after the exchange ended.
        """
        if self.done:
            raise ScramError("the SCRAM exchange is over")
        try:
            text = _text(client_message, "client message")
            return self._final(text) if self._credential is not None else self._first(text)
        except BaseException:
            self.done = True
            raise

    def _first(self, text: str) -> bytes:
        flag, sep, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep or not sep2 or flag not in ("n", "y"):
            raise ScramError("channel binding is not supported: the GS2 header must be n,, or y,,",
                             "channel-binding-not-supported" if flag.startswith("p=") else "invalid-encoding")
        if bare.startswith("m="):
            raise ScramError("mandatory extensions are not supported", "extensions-not-supported")
        name_text, nonce = _attributes(bare, "nr", "client-first message")
        _check_nonce(nonce)
        self.username = _decode_name(name_text)
        if authzid and (not authzid.startswith("a=") or _decode_name(authzid[2:]) != self.username):
            raise ScramError("an authorization id different from the user name is not supported",
                             "invalid-username-encoding")
        credential = self._lookup(self.username)
        if credential is None or credential.mechanism != self.mechanism:
            credential = self._mock(self.username)
        self._credential = credential
        self._gs2 = f"{flag},{authzid},"
        self._nonce = nonce + self._server_nonce
        server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._auth_prefix = f"{bare},{server_first}"
        return server_first.encode("utf-8")

    def _mock(self, username: str) -> ScramCredential:
        """A credential no password matches, with a salt that is the same for this name every time."""
        salt = hmac.new(self._mock_secret, f"{self.mechanism}:{username}".encode(), "sha256").digest()
        size = hashlib.new(self._hash).digest_size
        return ScramCredential(self.mechanism, salt[:SALT_BYTES], secrets.token_bytes(size), secrets.token_bytes(size),
                               self._mock_iterations)

    def _final(self, text: str) -> bytes:
        assert self._credential is not None
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise ScramError("malformed client-final message: no proof", "invalid-encoding")
        binding, nonce = _attributes(without_proof, "cr", "client-final message")
        if _unb64(binding, "channel binding") != self._gs2.encode("utf-8"):
            raise ScramError("the channel binding does not repeat the GS2 header", "channel-bindings-dont-match")
        if nonce != self._nonce:
            raise ScramError("the client-final nonce is not the exchange's", "invalid-encoding")
        proof = _unb64(proof_b64, "proof")
        stored_key = self._credential.stored_key
        if len(proof) != len(stored_key):
            raise ScramError("the proof has the wrong length", "invalid-encoding")
        auth_message = f"{self._auth_prefix},{without_proof}".encode("utf-8")
        client_key = _xor(proof, _hmac(self._hash, stored_key, auth_message))
        valid = hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), stored_key)
        self.done = True
        if not valid:
            raise ScramAuthenticationError()
        self.authenticated = True
        return f"v={_b64(_hmac(self._hash, self._credential.server_key, auth_message))}".encode("utf-8")
