"""The data-plane server: the listener and every connection, on one event loop.

Accepts connections, reads frames and hands them to the request handlers, writes
responses, and runs timers (long-poll deadlines, acknowledgement timeouts) and
callbacks posted from other threads (the flusher's fsync completions). There is no
thread per connection and no buffer per connection: reads go into one shared buffer,
so thousands of idle connections cost a file descriptor and a few hundred bytes each.
When ``accept()`` fails for lack of descriptors or memory the listener is paused
(50 ms, doubling to 1 s) and the failure logged at most once per 10 s with a count.

The loop itself (timers, the wake-up, calls from other threads) is
rill.broker.dataplane.event_loop's :class:`EventLoop`.

Thread-safety: only :meth:`call_soon_threadsafe`, :meth:`submit` and :meth:`stop` may be
called from other threads; everything else runs on the loop thread.
"""

from __future__ import annotations

import errno
import selectors
import socket
import time
from collections.abc import Callable
from typing import Any

import structlog

from rill.broker.dataplane.connection_table import ConnectionTable
from rill.broker.dataplane.event_loop import EventLoop, raise_fd_limit
from rill.broker.dataplane.listener_socket import Listener, ListenerSpec
from rill.broker.dataplane.request_memory import RequestMemory
from rill.broker.dataplane.server_connection import Connection, Slot
from rill.broker.dataplane.throttled_log import ThrottledLog
from rill.broker.dataplane.tls_connection import TlsConnection
from rill.broker.security.listeners import Endpoint, SecurityProtocol
from rill.client.protocol.framing import DecodeError, FrameTooLarge

log = structlog.get_logger(__name__)

IDLE_CHECK_INTERVAL = 5.0
RECV_BUFFER_BYTES = 1024 * 1024  # one receive buffer shared by every connection (one loop thread)


class BrokerServer(EventLoop):
    """Serves the data-plane protocol on its listeners (rill.broker.dataplane.listener_socket).

    ``listeners`` are the listening sockets with their security (TLS context, SASL);
    without them, one PLAINTEXT listener on ``host`` and ``port``. :attr:`host` and
    :attr:`port` are the first listener's. ``authentication_timeout_ms`` bounds a TLS
    handshake and SASL authentication together.

    ``handle(conn, frame_body) -> Slot | None`` does the work of a request; see
    rill.broker.dataplane.handlers. Limits (see connection_table.py, request_memory.py):
    ``max_connections`` and ``max_connections_per_ip`` (a newcomer takes the place of
    an idle connection of the busiest address before it is refused),
    ``queued_max_request_bytes`` for requests over 64 KiB being received,
    ``request_read_timeout_ms`` for such a request to arrive whole, and
    ``idle_timeout_ms`` for a connection with nothing in flight.
    """

    def __init__(self, host: str, port: int, *, max_request_size: int, max_connections: int,
                 idle_timeout_ms: int, max_connections_per_ip: int | None = None,
                 queued_max_request_bytes: int | None = None, request_read_timeout_ms: int = 30_000,
                 handle: Callable[[Connection, memoryview], Slot | None] | None = None,
                 listeners: list[ListenerSpec] | None = None, authentication_timeout_ms: int = 10_000) -> None:
        super().__init__()
        self.max_request_size = max_request_size
        self.idle_timeout = idle_timeout_ms / 1000.0
        self.read_timeout = request_read_timeout_ms / 1000.0
        self.handle = handle
        self.table = ConnectionTable(max_connections, max_connections_per_ip or max_connections)
        self.memory: RequestMemory[Connection] = RequestMemory(
            queued_max_request_bytes or 2 * max_request_size, self._memory_granted)
        self._recv = memoryview(bytearray(RECV_BUFFER_BYTES))
        self.fd_limit = raise_fd_limit()
        self.auth_timeout = authentication_timeout_ms / 1000.0
        specs = listeners or [ListenerSpec(Endpoint(SecurityProtocol.PLAINTEXT, host, port))]
        self.listeners: list[Listener] = []
        try:
            for spec in specs:
                self.listeners.append(Listener.bind(spec))
        except OSError:
            for bound in self.listeners:
                bound.sock.close()
            raise
        for bound in self.listeners:
            self.selector.register(bound.sock, selectors.EVENT_READ, bound)
        self._accepting = True
        self._accept_backoff = 0.0
        self._log = ThrottledLog()
        self.host, self.port = self.listeners[0].host, self.listeners[0].port
        self._sweep_interval = max(0.05, min(IDLE_CHECK_INTERVAL, self.idle_timeout / 4, self.read_timeout / 4,
                                             self.auth_timeout / 4))
        self._next_idle_check = time.monotonic() + self._sweep_interval
        self.on_fetched: Callable[[Connection, int], None] | None = None  # client quotas: fetch bytes queued
        self._dirty: set[Connection] = set()
        self._waiting: set[Connection] = set()  # connections whose held frame waits for a future

    @property
    def connections(self) -> dict[int, Connection]:
        """Open connections by descriptor."""
        return self.table.by_fd

    # ---------------------------------------------------------------- loop

    def serve_forever(self) -> None:
        log.info("broker.listening", host=self.host, port=self.port, fd_limit=self.fd_limit,
                 listeners=[str(bound.endpoint) for bound in self.listeners])
        try:
            while not self._stopping:
                self.run_once(1.0)
        finally:
            self._close_all()

    def run_once(self, cap: float) -> None:
        for key, mask in self.selector.select(self._next_timeout(cap)):
            data = key.data
            if data is None:
                self._drain_wakeups()
            elif data.__class__ is Listener:
                self._accept(data)
            else:
                if mask & selectors.EVENT_READ:
                    self._on_readable(data)
                if mask & selectors.EVENT_WRITE and not data.closed:
                    self.mark_dirty(data)
        self._run_due()
        self._flush_dirty()
        if time.monotonic() >= self._next_idle_check:
            self._sweep()

    def mark_dirty(self, conn: Connection) -> None:
        """Note that ``conn`` may have responses ready to send (sent at the end of this turn)."""
        if not conn.closed:
            self._dirty.add(conn)

    # ---------------------------------------------------------------- connections

    def _accept(self, listener: Listener) -> None:
        for _ in range(256):
            try:
                sock, addr = listener.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._pause_accepting(exc)
                    return
                self._log.warning("broker.accept_failed", error=exc.strerror or str(exc))
                continue  # that one connection failed (aborted by its peer, say); go on
            self._accept_backoff = 0.0
            self._admit(sock, addr, listener)

    def _pause_accepting(self, exc: OSError) -> None:
        """Out of descriptors or memory: stop accepting for a while (50 ms, doubling to 1 s)."""
        self._accept_backoff = min(max(2 * self._accept_backoff, 0.05), 1.0)
        self._log.warning("broker.accept_failed", error=exc.strerror or str(exc), retry_in_s=self._accept_backoff,
                          open_connections=len(self.table), fd_limit=self.fd_limit)
        if self._accepting:
            self._accepting = False
            for listener in self.listeners:
                self.selector.unregister(listener.sock)
        self.call_later(self._accept_backoff, self._resume_accepting)

    def _resume_accepting(self) -> None:
        if not self._accepting and not self._stopping:
            self._accepting = True
            for listener in self.listeners:
                self.selector.register(listener.sock, selectors.EVENT_READ, listener)

    def _admit(self, sock: socket.socket, addr: Any, listener: Listener) -> None:
        ip = str(addr[0]) if isinstance(addr, tuple) else str(addr)
        victim, limit = self.table.make_room(ip)
        if limit:
            if victim is None:
                self._log.warning("broker.connection_refused", peer=ip, reason=f"{limit} reached",
                                  connections=len(self.table), from_peer=self.table.count(ip))
                sock.close()
                return
            self._log.warning("broker.connection_evicted", peer=str(victim.addr), reason=f"{limit} reached",
                              detail="the least recently active idle connection made room for a new one")
            self.close_connection(victim)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = self._connection(sock, addr, listener)
        if conn is None:
            return
        self.table.add(conn)
        self.selector.register(conn.sock, selectors.EVENT_READ, conn)
        conn.events = selectors.EVENT_READ

    def _connection(self, sock: socket.socket, addr: Any, listener: Listener) -> Connection | None:
        """The connection object for a socket accepted on ``listener`` (None: it could not be set up)."""
        if listener.tls is None:
            conn = Connection(sock, addr, self.max_request_size, self.memory)
        else:
            try:
                wrapped = listener.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            except OSError as exc:
                self._log.warning("broker.tls_setup_failed", peer=str(addr), error=str(exc))
                sock.close()
                return None
            conn = TlsConnection(wrapped, addr, self.max_request_size, self.memory)
        conn.listener = listener.endpoint.name
        conn.on_fetched = self.on_fetched
        if listener.authenticator is not None:
            conn.authenticator = listener.authenticator(conn)
            conn.decoder.max_frame_size = min(conn.decoder.max_frame_size, listener.max_unauthenticated_frame)
        if listener.tls is not None or listener.authenticator is not None:
            conn.setup_deadline = time.monotonic() + self.auth_timeout
        return conn

    def _on_readable(self, conn: Connection) -> None:
        if self.handle is None:
            raise RuntimeError("BrokerServer.handle is not set")
        try:
            alive = conn.read(self.handle, self._recv)
        except DecodeError as exc:
            self._bad_frame(conn, exc)
            return
        except Exception:  # a handler bug must cost one connection, not the broker
            log.exception("broker.handler_failed", peer=str(conn.addr))
            self.close_connection(conn)
            return
        if not alive:
            self.close_connection(conn)
            return
        self.table.touch(conn)
        self._note_waiting(conn)
        self.mark_dirty(conn)

    def _bad_frame(self, conn: Connection, exc: DecodeError) -> None:
        """A malformed frame: close that connection, saying so (and what it looks like)."""
        if isinstance(exc, FrameTooLarge) and exc.looks_like_tls() and not isinstance(conn, TlsConnection):
            self._log.warning("broker.bad_frame", peer=str(conn.addr), listener=conn.listener,
                              error="a TLS handshake on a listener without TLS (the client's security.protocol "
                                    "is SSL or SASL_SSL; this listener is not)")
        else:
            log.warning("broker.bad_frame", peer=str(conn.addr), error=str(exc))
        self.close_connection(conn)

    def _memory_granted(self, conn: Connection) -> None:
        """Request memory may be free for ``conn`` now: let it retry on the next turn."""
        self.call_later(0, lambda: self._process(conn))

    def _note_waiting(self, conn: Connection) -> None:
        """Resume ``conn`` on the loop once the future its held frame waits for is done."""
        deferred = conn.waiting_for
        if deferred is None or conn in self._waiting:
            return
        self._waiting.add(conn)
        deferred.future.add_done_callback(lambda _: self.call_soon_threadsafe(lambda: self._resume(conn)))

    def _resume(self, conn: Connection) -> None:
        self._waiting.discard(conn)
        if not conn.closed and self.handle is not None:
            self._guard(conn, lambda: conn.resume(self.handle))  # type: ignore[arg-type]

    def _process(self, conn: Connection) -> None:
        if not conn.closed and self.handle is not None:
            self._guard(conn, lambda: conn.process_frames(self.handle))  # type: ignore[arg-type]

    def _guard(self, conn: Connection, step: Callable[[], None]) -> None:
        """Run request handling for ``conn`` outside a read; a bad frame or a bug costs this connection only."""
        try:
            step()
        except DecodeError as exc:
            self._bad_frame(conn, exc)
            return
        except Exception:
            log.exception("broker.handler_failed", peer=str(conn.addr))
            self.close_connection(conn)
            return
        self._note_waiting(conn)
        self.mark_dirty(conn)

    def _flush_dirty(self) -> None:
        while self._dirty:
            conn = self._dirty.pop()
            if conn.closed:
                continue
            try:
                done = conn.flush()
                if done and conn.accepting_requests() and conn.has_unhandled() and self.handle:
                    conn.process_frames(self.handle)  # frames buffered while reading was paused
                    self._note_waiting(conn)
                    done = conn.flush()
            except DecodeError as exc:
                self._bad_frame(conn, exc)
                continue
            except OSError as exc:  # the peer went away, or a slice's file was cut short
                log.info("broker.connection_broken", peer=str(conn.addr), error=str(exc))
                self.close_connection(conn)
                continue
            except Exception:  # a handler bug costs this connection only
                log.exception("broker.handler_failed", peer=str(conn.addr))
                self.close_connection(conn)
                continue
            if done and conn.closing:  # the answer that ends it is out
                self.close_connection(conn)
                continue
            self._watch(conn, want_write=not done)

    def _watch(self, conn: Connection, want_write: bool) -> None:
        """Watch for reads while the connection takes requests, for writes while output is stuck.

        A connection with too many responses waiting (all deferred), or waiting for
        request memory, is watched for nothing until that changes; :meth:`mark_dirty`
        then brings it back.
        """
        events = (selectors.EVENT_READ if conn.accepting_requests() else 0) | (
            selectors.EVENT_WRITE if want_write else 0)
        if events == conn.events:
            return
        if conn.events == 0:
            self.selector.register(conn.sock, events, conn)
        elif events == 0:
            self.selector.unregister(conn.sock)
        else:
            self.selector.modify(conn.sock, events, conn)
        conn.events = events

    def close_connection(self, conn: Connection) -> None:
        if conn.closed:
            return
        self.table.remove(conn)
        self._dirty.discard(conn)
        if conn.events:
            self.selector.unregister(conn.sock)
            conn.events = 0
        conn.close()

    def _sweep(self) -> None:
        """Close connections idle for ``connections.max.idle.ms`` and large requests slower than the read timeout."""
        now = time.monotonic()
        self._next_idle_check = now + self._sweep_interval
        for conn in list(self.table.by_fd.values()):
            if conn.setup_deadline is not None and now > conn.setup_deadline:
                self._log.warning("broker.authentication_timeout", peer=str(conn.addr), listener=conn.listener,
                                  timeout_s=self.auth_timeout, detail="the TLS handshake and SASL authentication did "
                                  "not finish in time (authentication.timeout.ms)")
                self.close_connection(conn)
            elif conn.body_since is not None and now - conn.body_since > self.read_timeout:
                self._log.warning("broker.request_read_timeout", peer=str(conn.addr), timeout_s=self.read_timeout,
                                  detail="a request over 64 KiB did not arrive whole in time (request.read.timeout.ms)")
                self.close_connection(conn)
            elif now - conn.last_active > self.idle_timeout and conn.idle():
                log.info("broker.connection_idle_closed", peer=str(conn.addr))
                self.close_connection(conn)

    def _close_all(self) -> None:
        for conn in list(self.table.by_fd.values()):
            try:
                conn.flush()
            except OSError:
                pass
            self.close_connection(conn)
        for listener in self.listeners:
            if self._accepting:
                self.selector.unregister(listener.sock)
            listener.sock.close()
        self.close()
