"""The broker's event loop: one thread, one selector, every connection.

Accepts connections, reads frames and hands them to the request handlers, writes
responses, and runs timers (long-poll deadlines, acknowledgement timeouts) and
callbacks posted from other threads (the flusher's fsync completions). There is no
thread per connection: thousands of idle connections cost a file descriptor and a
small buffer each.

Thread-safety: only :meth:`call_soon_threadsafe` and :meth:`stop` may be called from
other threads; everything else runs on the loop thread.
"""

from __future__ import annotations

import errno
import heapq
import itertools
import resource
import selectors
import socket
import time
from collections import deque
from collections.abc import Callable

import structlog

from rill.broker.network import Connection, Slot
from rill.client.protocol.framing import DecodeError

log = structlog.get_logger(__name__)

IDLE_CHECK_INTERVAL = 5.0


class Timer:
    __slots__ = ("deadline", "callback", "cancelled")

    def __init__(self, deadline: float, callback: Callable[[], None]) -> None:
        self.deadline = deadline
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


def raise_fd_limit() -> int:
    """Raise the soft open-files limit to the hard limit; return the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return target
        except (ValueError, OSError):
            return soft
    return soft


class EventLoop:
    """Selector loop with timers and a thread-safe call queue."""

    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        self._timers: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self._calls: deque[Callable[[], None]] = deque()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._stopping = False

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(time.monotonic() + delay, callback)
        heapq.heappush(self._timers, (timer.deadline, next(self._seq), timer))
        return timer

    def call_soon_threadsafe(self, callback: Callable[[], None]) -> None:
        self._calls.append(callback)
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # a wake-up is already pending, or the loop is closed

    def stop(self) -> None:
        self._stopping = True
        self.call_soon_threadsafe(lambda: None)

    def _next_timeout(self, cap: float) -> float:
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        if self._calls:
            return 0.0
        if not self._timers:
            return cap
        return max(0.0, min(cap, self._timers[0][0] - time.monotonic()))

    def _run_due(self) -> None:
        while self._calls:
            self._guarded(self._calls.popleft())
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, timer = heapq.heappop(self._timers)
            if not timer.cancelled:
                self._guarded(timer.callback)

    @staticmethod
    def _guarded(callback: Callable[[], None]) -> None:
        """Run a callback; a bug in one must not stop the loop that serves everyone."""
        try:
            callback()
        except Exception:
            log.exception("loop.callback_failed", callback=getattr(callback, "__qualname__", repr(callback)))

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        self.selector.close()
        self._wake_r.close()
        self._wake_w.close()


class BrokerServer(EventLoop):
    """Serves the data-plane protocol on one listening socket.

    ``handle(conn, frame_body) -> Slot | None`` does the work of a request; see
    rill.broker.handlers.
    """

    def __init__(self, host: str, port: int, *, max_request_size: int, max_connections: int,
                 idle_timeout_ms: int, handle: Callable[[Connection, memoryview], Slot | None] | None = None) -> None:
        super().__init__()
        self.max_request_size = max_request_size
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout_ms / 1000.0
        self.handle = handle
        self.connections: dict[int, Connection] = {}
        self.fd_limit = raise_fd_limit()
        self.listener = socket.create_server((host, port), backlog=4096, reuse_port=False)
        self.listener.setblocking(False)
        self.selector.register(self.listener, selectors.EVENT_READ, None)
        self.host, self.port = self.listener.getsockname()[:2]
        self._next_idle_check = time.monotonic() + IDLE_CHECK_INTERVAL
        self._dirty: set[Connection] = set()
        self._waiting: set[Connection] = set()  # connections whose held frame waits for a future

    # ---------------------------------------------------------------- loop

    def serve_forever(self) -> None:
        log.info("broker.listening", host=self.host, port=self.port, fd_limit=self.fd_limit)
        try:
            while not self._stopping:
                self.run_once(1.0)
        finally:
            self._close_all()

    def run_once(self, cap: float) -> None:
        for key, mask in self.selector.select(self._next_timeout(cap)):
            data = key.data
            if data is None:
                if key.fileobj is self.listener:
                    self._accept()
                else:
                    self._drain_wakeups()
            else:
                if mask & selectors.EVENT_READ:
                    self._on_readable(data)
                if mask & selectors.EVENT_WRITE and not data.closed:
                    self.mark_dirty(data)
        self._run_due()
        self._flush_dirty()
        if time.monotonic() >= self._next_idle_check:
            self._close_idle()

    def mark_dirty(self, conn: Connection) -> None:
        """Note that ``conn`` may have responses ready to send (sent at the end of this turn)."""
        if not conn.closed:
            self._dirty.add(conn)

    # ---------------------------------------------------------------- connections

    def _accept(self) -> None:
        for _ in range(256):
            try:
                sock, addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.warning("broker.accept_failed", error=exc.strerror)
                    return
                raise
            if len(self.connections) >= self.max_connections:
                log.warning("broker.connection_refused", peer=str(addr), reason="max.connections reached",
                            limit=self.max_connections)
                sock.close()
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Connection(sock, addr, self.max_request_size)
            self.connections[conn.fd] = conn
            self.selector.register(sock, selectors.EVENT_READ, conn)
            conn.events = selectors.EVENT_READ

    def _on_readable(self, conn: Connection) -> None:
        if self.handle is None:
            raise RuntimeError("BrokerServer.handle is not set")
        try:
            alive = conn.read(self.handle)
        except DecodeError as exc:
            log.warning("broker.bad_frame", peer=str(conn.addr), error=str(exc))
            self.close_connection(conn)
            return
        except Exception:  # a handler bug must cost one connection, not the broker
            log.exception("broker.handler_failed", peer=str(conn.addr))
            self.close_connection(conn)
            return
        if not alive:
            self.close_connection(conn)
            return
        self._note_waiting(conn)
        self.mark_dirty(conn)

    def _note_waiting(self, conn: Connection) -> None:
        """Resume ``conn`` on the loop once the future its held frame waits for is done."""
        deferred = conn.waiting_for
        if deferred is None or conn in self._waiting:
            return
        self._waiting.add(conn)
        deferred.future.add_done_callback(lambda _: self.call_soon_threadsafe(lambda: self._resume(conn)))

    def _resume(self, conn: Connection) -> None:
        self._waiting.discard(conn)
        if conn.closed or self.handle is None:
            return
        try:
            conn.resume(self.handle)
        except DecodeError as exc:
            log.warning("broker.bad_frame", peer=str(conn.addr), error=str(exc))
            self.close_connection(conn)
            return
        except Exception:  # a handler bug costs this connection only
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
                log.warning("broker.bad_frame", peer=str(conn.addr), error=str(exc))
                self.close_connection(conn)
                continue
            except OSError as exc:  # the peer went away, or a slice's file was cut short
                log.info("broker.connection_broken", peer=str(conn.addr), error=str(exc))
                self.close_connection(conn)
                continue
            except Exception:  # a handler bug costs this connection only
                log.exception("broker.handler_failed", peer=str(conn.addr))
                self.close_connection(conn)
                continue
            self._watch(conn, want_write=not done)

    def _watch(self, conn: Connection, want_write: bool) -> None:
        """Watch for reads while the connection takes requests, for writes while output is stuck.

        A connection with too many responses waiting (all deferred) is watched for
        nothing until one fills; :meth:`mark_dirty` then brings it back.
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
        self.connections.pop(conn.fd, None)
        if conn.events:
            self.selector.unregister(conn.sock)
            conn.events = 0
        conn.close()

    def _close_idle(self) -> None:
        now = time.monotonic()
        self._next_idle_check = now + IDLE_CHECK_INTERVAL
        for conn in list(self.connections.values()):
            if now - conn.last_active > self.idle_timeout and not conn.pending:
                log.info("broker.connection_idle_closed", peer=str(conn.addr))
                self.close_connection(conn)

    def _close_all(self) -> None:
        for conn in list(self.connections.values()):
            try:
                conn.flush()
            except OSError:
                pass
            self.close_connection(conn)
        self.selector.unregister(self.listener)
        self.listener.close()
        self.close()
