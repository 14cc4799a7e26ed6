"""Setting up a connection once TCP is connected: the TLS handshake, then SASL, then CLIENT_HELLO.

:class:`ConnectionSetup` drives both on a socket, in either of
:class:`~rill.client.net.broker_socket.BrokerSocket`'s modes: non-blocking (each
:meth:`ConnectionSetup.step` does what the socket allows and says which readiness it
waits for; the owner's selector loop calls it again) or blocking (one call runs it
all, each operation bounded by the socket's timeout). The SASL exchange is
:class:`~rill.client.security.sasl_client.SaslClientSession`'s; this only moves its
frames. Last, a client with a ``client.id`` names itself (CLIENT_HELLO,
rill.client.protocol.client_hello: the broker's client quotas know it by it). Until all
is done the connection's queued requests stay queued: no request goes out before the
client is authenticated and named.

Failures raise :class:`~rill.client.errors.AuthenticationFailed` (a ConnectionClosed)
with the reason in words: the broker's certificate refused, a listener that is not
TLS, a wrong password.
"""

from __future__ import annotations

import selectors
import socket
import ssl

from rill.client.errors import AuthenticationFailed, BrokerError, ConnectionClosed
from rill.client.protocol.client_hello import encode_client_hello
from rill.client.protocol.framing import INT32
from rill.client.security.client_security import ClientSecurity
from rill.client.security.sasl_client import SaslClientSession
from rill.client.security.scram import ScramError

__all__ = ["ConnectionSetup"]

_MAX_RESPONSE = 70 * 1024  # a SASL response: a token of at most 64 KiB and its fields


class ConnectionSetup:
    """TLS and/or SASL for one connection attempt to ``host`` (named ``name`` in messages)."""

    def __init__(self, security: ClientSecurity | None, host: str, name: str, client_id: str = "") -> None:
        self.security = security
        self.host = host
        self.name = name
        self._handshaking = security is not None and security.tls
        self._sasl = SaslClientSession(security.sasl_mechanism, security.username, security.password) \
            if security is not None and security.sasl else None
        self._hello = encode_client_hello(client_id) if client_id else b""
        self._hello_sent = not client_id
        self._out = self._sasl.first_frame() if self._sasl is not None else b""
        self._in = bytearray()

    def wrap(self, sock: socket.socket) -> socket.socket:
        """The socket to use: ``sock`` wrapped in TLS (handshake not started) when the protocol has TLS."""
        context = self.security.ssl_context if self.security is not None else None
        if context is None:
            return sock
        return context.wrap_socket(sock, server_hostname=self.host, do_handshake_on_connect=False)

    def step(self, sock: socket.socket) -> int:
        """Advance; return 0 when done, else the selector events to wait for.

        Raises:
            AuthenticationFailed: the TLS handshake or SASL failed (the caller closes the socket).
            ConnectionClosed: the connection broke or timed out.
        """
        if self._handshaking:
            wanted = self._handshake(sock)
            if wanted:
                return wanted
        if self._sasl is not None and not self._sasl.done:
            wanted = self._exchange(sock)
            if wanted:
                return wanted
        if not self._hello_sent:
            self._hello_sent = True
            self._out = self._hello
        if self._hello:
            return self._greet(sock)
        return 0

    def _handshake(self, sock: socket.socket) -> int:
        assert isinstance(sock, ssl.SSLSocket)
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            return selectors.EVENT_READ
        except ssl.SSLWantWriteError:
            return selectors.EVENT_WRITE
        except ssl.SSLCertVerificationError as exc:
            raise AuthenticationFailed(f"TLS handshake with broker {self.name} failed: the broker's certificate "
                                       f"was refused: {exc.verify_message} (ssl.cafile, ssl.check.hostname)") from exc
        except ssl.SSLError as exc:
            raise AuthenticationFailed(f"TLS handshake with broker {self.name} failed: {_tls_reason(exc)}") from exc
        except (ConnectionError, TimeoutError, OSError) as exc:
            raise AuthenticationFailed(
                f"TLS handshake with broker {self.name} failed: {exc.strerror or exc or type(exc).__name__} (is it a "
                "TLS listener? does it require a client certificate, ssl.certfile?)") from exc
        self._handshaking = False
        return 0

    def _greet(self, sock: socket.socket) -> int:
        """Send CLIENT_HELLO and read its answer (an error there only leaves the connection unnamed)."""
        wanted = self._send(sock, "CLIENT_HELLO")
        if wanted:
            return wanted
        body = self._receive(sock)
        if body is None:
            return selectors.EVENT_READ
        self._hello = b""
        return 0

    def _send(self, sock: socket.socket, during: str) -> int:
        """Send what is left of the frame being sent: 0 when sent, else the events to wait for."""
        while self._out:
            try:
                sent = sock.send(self._out)
            except (BlockingIOError, ssl.SSLWantWriteError):
                return selectors.EVENT_WRITE
            except ssl.SSLWantReadError:
                return selectors.EVENT_READ
            except OSError as exc:
                raise ConnectionClosed(f"connection to broker {self.name} failed during {during}: {exc}") from exc
            self._out = self._out[sent:]
        return 0

    def _exchange(self, sock: socket.socket) -> int:
        assert self._sasl is not None
        while True:
            wanted = self._send(sock, "SASL")
            if wanted:
                return wanted
            body = self._receive(sock)
            if body is None:
                return selectors.EVENT_READ
            try:
                frame = self._sasl.on_response(body)
            except (BrokerError, ScramError, ValueError) as exc:
                raise AuthenticationFailed(f"SASL {self._sasl.mechanism} authentication with broker {self.name} "
                                           f"failed: {exc}") from exc
            if frame is None:
                return 0
            self._out = frame

    def _receive(self, sock: socket.socket) -> bytes | None:
        """Read the next whole response frame's body, or None if more bytes must arrive first."""
        while True:
            if len(self._in) >= 4:
                size = INT32.unpack_from(self._in)[0]
                if not 2 <= size <= _MAX_RESPONSE:
                    raise AuthenticationFailed(f"SASL with broker {self.name}: a response of {size} bytes (is this a "
                                               "SASL listener? security.protocol)")
                if len(self._in) >= 4 + size:
                    body = bytes(self._in[4:4 + size])
                    del self._in[:4 + size]
                    return body
            try:
                data = sock.recv(65536)
            except (BlockingIOError, ssl.SSLWantReadError):
                return None
            except ssl.SSLWantWriteError:
                return None
            except OSError as exc:
                raise ConnectionClosed(f"connection to broker {self.name} failed during SASL: {exc}") from exc
            if not data:
                raise AuthenticationFailed(f"broker {self.name} closed the connection during SASL authentication "
                                           "(is it a SASL listener? security.protocol)")
            self._in += data


def _tls_reason(exc: ssl.SSLError) -> str:
    reason = exc.reason or ""
    if reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"):
        return "the broker does not speak TLS on that port (a plaintext listener? security.protocol)"
    if "CERTIFICATE_REQUIRED" in reason or "HANDSHAKE_FAILURE" in reason:
        return f"the broker requires a client certificate (ssl.certfile, ssl.keyfile): {reason}"
    if "UNKNOWN_CA" in reason or "BAD_CERTIFICATE" in reason or "CERTIFICATE" in reason:
        return f"the broker refused this client's certificate ({reason})"
    return str(exc)
