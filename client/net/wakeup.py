"""A wake-up another thread can ring to end a selector wait: a socket pair and a flag.

Shared by the client's :class:`~rill.client.net.selector_loop.SelectorLoop` (the producer's
send thread, the consumer's ``poll()``) and the broker's event loop. Ringing while a
ring is pending costs no system call. The owner drains it when its selector reports the
read end ready, *then* looks at what the ringing threads changed: a ring that saw one
pending changed its state before the drain, so that look sees it.

Thread-safety: :meth:`Wakeup.ring` from any thread, even after :meth:`Wakeup.close`;
the rest from the owner's.
"""

from __future__ import annotations

import selectors
import socket

__all__ = ["Wakeup"]


class Wakeup:
    """Register :attr:`reader` for reading with ``data=None``; call :meth:`drain` when it is ready."""

    def __init__(self) -> None:
        self.reader, self._writer = socket.socketpair()
        self.reader.setblocking(False)
        self._writer.setblocking(False)
        self._pending = False

    def register(self, selector: selectors.BaseSelector) -> None:
        selector.register(self.reader, selectors.EVENT_READ, None)

    def ring(self) -> None:
        """End the owner's current or next wait. Never raises."""
        if not self._pending:
            self._pending = True
            try:
                self._writer.send(b"\0")
            except OSError:  # the buffer is full (a ring is pending anyway) or it is closed
                pass

    def drain(self) -> None:
        try:
            while self.reader.recv(4096):
                pass
        except OSError:
            pass
        self._pending = False

    def close(self) -> None:
        self.reader.close()
        self._writer.close()
