"""The client's one selector loop: broker sockets plus a wake-up another thread can ring.

The producer's send thread and the consumer's ``poll()`` each own one
:class:`SelectorLoop`. :meth:`SelectorLoop.wait` is the loop's single blocking call; it
returns the broker sockets that are ready, or returns early when :meth:`SelectorLoop.wake`
is called from another thread (a producer's ``send()``, a gRPC future's done-callback).

The wake-up is rill.client.net.wakeup's (shared with the broker's event loop). The owner
must look at whatever the ringing thread changed *after* :meth:`SelectorLoop.wait`
returns.

Thread-safety: :meth:`SelectorLoop.wake` from any thread; everything else from the owner's.
"""

from __future__ import annotations

import selectors
from typing import Any

from rill.client.net.broker_socket import BrokerSocket
from rill.client.net.wakeup import Wakeup

__all__ = ["SelectorLoop"]


class SelectorLoop:
    """A selector over :class:`~rill.client.net.broker_socket.BrokerSocket` objects and a wake-up."""

    def __init__(self) -> None:
        self.selector = selectors.DefaultSelector()
        self._wakeup = Wakeup()
        self._wakeup.register(self.selector)
        self.closed = False

    def wake(self, *_: Any) -> None:
        """Make the current or next :meth:`wait` return at once. Thread-safe; never raises."""
        self._wakeup.ring()

    def watch(self, bsock: BrokerSocket[Any]) -> None:
        """Watch ``bsock`` for what it wants now (reading; writing while it has output or connects)."""
        sock = bsock.sock
        if sock is None:
            return
        events = bsock.wanted_events()
        if events == bsock.events:
            return
        if bsock.events:
            self.selector.modify(sock, events, bsock)
        else:
            self.selector.register(sock, events, bsock)
            bsock.selector = self.selector
        bsock.events = events

    def wait(self, timeout: float | None) -> list[tuple[BrokerSocket[Any], int]]:
        """Block up to ``timeout`` seconds (None: until something happens; 0: just look);
        return the ready sockets with their event masks."""
        ready = []
        for key, mask in self.selector.select(None if timeout is None else max(timeout, 0.0)):
            if key.data is None:
                self._wakeup.drain()
            else:
                ready.append((key.data, mask))
        return ready

    def close(self) -> None:
        """Close the selector and the wake-up (the broker sockets are their owner's to close)."""
        if self.closed:
            return
        self.closed = True
        self.selector.close()
        self._wakeup.close()
