"""Serving the console over HTTP with uvicorn, on a socket bound before the server starts.

Binding first (:func:`listen`) means a port already in use is an error the command can
name at once, port 0 gets a free port whose number is known before anything is served,
and the URL can be printed as soon as it is valid. :meth:`ConsoleServer.run` serves in
the calling thread (``rill console``: Ctrl-C and SIGTERM stop it gracefully, which also
stops the lag sampler); :meth:`ConsoleServer.start` serves on a daemon thread and
:meth:`ConsoleServer.stop` ends it (tests, embedding).

uvicorn is given no logging configuration of its own (``log_config=None``), so it leaves
the process's logging as it was; it logs only warnings and errors.
"""

from __future__ import annotations

import socket
import threading
import time

import uvicorn
from starlette.types import ASGIApp

__all__ = ["ConsoleServer", "listen"]


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0: a free port); IPv6 for an address with a colon.

    Raises:
        OSError: the address cannot be bound (in use, not an address of this machine).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


class ConsoleServer:
    """The console application served on ``host``:``port``; the socket is bound when this is made."""

    def __init__(self, app: ASGIApp, host: str, port: int) -> None:
        self.sock = listen(host, port)
        self.host = host
        self.port = int(self.sock.getsockname()[1])
        self.server = uvicorn.Server(uvicorn.Config(app, log_config=None, log_level="warning", access_log=False,
                                                    lifespan="on", timeout_graceful_shutdown=5))
        self._thread: threading.Thread | None = None
        self._stopping = False

    @property
    def url(self) -> str:
        """``http://host:port/`` (an IPv6 host in brackets)."""
        host = self.host.strip("[]")
        return f"http://[{host}]:{self.port}/" if ":" in host else f"http://{host}:{self.port}/"

    def run(self) -> None:
        """Serve until stopped (Ctrl-C, SIGTERM, or :meth:`stop` from another thread)."""
        try:
            self.server.run(sockets=[self.sock])
        finally:
            self.sock.close()

    def start(self, timeout: float = 15.0) -> None:
        """Serve on a daemon thread; return once the server answers (TimeoutError if it did not within ``timeout``)."""
        self._thread = threading.Thread(target=self.run, name="rill-console-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise TimeoutError(f"the console did not start serving {self.url} within {timeout} s")
            time.sleep(0.02)

    @property
    def interrupted(self) -> bool:
        """Whether a signal (Ctrl-C, SIGTERM) ended :meth:`run`, rather than :meth:`stop`. uvicorn re-raises
        the signal once it has shut down, but under asyncio's own SIGINT handler that KeyboardInterrupt
        does not always reach the caller: this says it all the same."""
        return bool(self.server.should_exit) and not self._stopping

    def stop(self, timeout: float = 15.0) -> None:
        """Stop serving (and the sampler, through the application's shutdown) and wait for the thread."""
        self._stopping = True
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
