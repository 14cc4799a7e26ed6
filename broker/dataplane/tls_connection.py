"""A client connection on a TLS listener (SSL or SASL_SSL): the handshake, then frames through TLS.

Everything else is :class:`~rill.broker.dataplane.server_connection.Connection`'s; this
class changes how bytes cross the socket, on the same event loop, without blocking:

- **Handshake.** The socket is wrapped at accept without handshaking; each readable or
  writable event advances ``do_handshake()``, which says whether it waits to read or to
  write. A handshake that fails (a plaintext client, an unknown CA, an expired
  certificate, no certificate where one is required) is logged with the reason in
  words and costs that connection only. The server closes a connection whose
  handshake and authentication take longer than ``authentication.timeout.ms``.
- **Reads** drain what OpenSSL has decrypted: a selector sees only the kernel's buffer,
  so bytes of a record read in part would otherwise wait for the next packet.
- **Writes** go in chunks of at most :data:`CHUNK` bytes. A TLS write that would block
  must be retried with the same bytes, so a chunk stays the same until it is sent.
- **Fetches** cannot use ``sendfile``: the kernel cannot encrypt (no kernel TLS here),
  so file slices are read with ``os.pread`` into a chunk and sent through TLS
  (docs/benchmarks.md measures what that costs).

A client certificate, when one was verified, makes the connection's principal
``User:<common name>``.

Not thread-safe: every method runs on the broker's event-loop thread.
"""

from __future__ import annotations

import os
import ssl
from typing import Any

import structlog

from rill.broker.dataplane.request_memory import RequestMemory
from rill.broker.dataplane.server_connection import Connection, Handler
from rill.broker.dataplane.throttled_log import ThrottledLog
from rill.broker.log.results import FileSlice
from rill.broker.security.tls_contexts import principal_from_certificate

__all__ = ["CHUNK", "TlsConnection", "explain_tls_error"]

log = structlog.get_logger(__name__)
_throttled = ThrottledLog()

CHUNK = 256 * 1024  # bytes per TLS write: large enough to amortize, small enough to retry unchanged
_WOULD_BLOCK = (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError)


def explain_tls_error(exc: BaseException) -> str:
    """A TLS failure in words an operator can act on."""
    reason = getattr(exc, "reason", None) or ""
    verify = getattr(exc, "verify_message", None)
    if reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNKNOWN_PROTOCOL", "RECORD_LAYER_FAILURE"):
        return "the client does not speak TLS (a plaintext client on a TLS listener?)"
    if reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE":
        return "the client sent no certificate, and ssl.client.auth = required"
    if verify:
        return f"the client's certificate was refused: {verify}"
    if reason.startswith("TLSV1_ALERT_") or reason.startswith("SSLV3_ALERT_"):
        return f"the client refused the handshake ({reason.split('ALERT_', 1)[1].lower().replace('_', ' ')}: " \
               "does it trust the broker's CA?)"
    return str(exc) or type(exc).__name__


class TlsConnection(Connection):
    """A connection whose socket is an ``ssl.SSLSocket`` made with ``do_handshake_on_connect=False``."""

    sock: ssl.SSLSocket

    def __init__(self, sock: ssl.SSLSocket, addr: Any, max_request_size: int,
                 memory: RequestMemory[Connection] | None = None) -> None:
        super().__init__(sock, addr, max_request_size, memory)
        self.handshaking = True
        self._handshake_wants_write = False
        self._chunk: bytes | None = None  # a file slice's bytes being sent (resent unchanged until sent)

    # ---------------------------------------------------------------- handshake

    def _handshake(self) -> bool:
        """Advance the handshake; True once done. Raises OSError (logged) when it failed."""
        try:
            self.sock.do_handshake()
        except ssl.SSLWantReadError:
            self._handshake_wants_write = False
            return False
        except ssl.SSLWantWriteError:
            self._handshake_wants_write = True
            return False
        except ssl.SSLError as exc:
            _throttled.warning("broker.tls_handshake_failed", peer=str(self.addr), reason=explain_tls_error(exc))
            raise
        except OSError as exc:
            log.info("broker.tls_handshake_failed", peer=str(self.addr), reason=exc.strerror or str(exc))
            raise
        self.handshaking = False
        self._handshake_wants_write = False
        named = principal_from_certificate(self.sock.getpeercert())
        if named is not None:
            self.principal = named
        if self.authenticator is None:
            self.setup_deadline = None
        return True

    def read(self, handle: Handler, buffer: memoryview) -> bool:
        if self.handshaking:
            try:
                if not self._handshake():
                    return True
            except OSError:
                return False
        return super().read(handle, buffer)

    def flush(self) -> bool:
        if self.handshaking and not self._handshake():
            return not self._handshake_wants_write  # False: watch for writes
        return super().flush()

    # ---------------------------------------------------------------- bytes

    def _recv_into(self, target: memoryview) -> int | None:
        try:
            return self.sock.recv_into(target)
        except ssl.SSLZeroReturnError:
            return 0  # the client closed TLS cleanly
        except _WOULD_BLOCK:
            return None
        except ssl.SSLError as exc:
            log.info("broker.tls_read_failed", peer=str(self.addr), reason=explain_tls_error(exc))
            raise

    def _buffered(self) -> bool:
        return self.sock.pending() > 0

    def _send_bytes(self, data: bytes) -> int | None:
        try:
            return self.sock.send(memoryview(data)[self._out_pos:self._out_pos + CHUNK])
        except _WOULD_BLOCK:
            return None

    def _sendfile(self, part: FileSlice) -> int | None:
        if part.file is None:
            raise OSError(f"a fetch slice of {part.length} bytes at {part.offset} has no file")
        chunk = self._chunk
        if chunk is None:
            want = min(CHUNK, part.length - self._out_pos)
            chunk = os.pread(part.file.fileno(), want, part.position + self._out_pos)
            if len(chunk) < want:  # the file is shorter than the slice: never send a short response
                end = part.position + self._out_pos + len(chunk)
                raise OSError(f"segment file ended inside a fetch slice at {end}")
            self._chunk = chunk
        try:
            sent = self.sock.send(chunk)
        except _WOULD_BLOCK:
            return None
        self._chunk = None
        return sent
