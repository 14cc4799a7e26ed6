"""Errors the producer raises itself (broker errors come from rill.client.errors).

Hierarchy::

    RillError
    ├── ProducerTimeout (also a TimeoutError)   something did not happen in time
    │   └── BufferFull                          send() waited max.block.ms for buffer space
    └── ProducerClosed                          send() after close(), or close() gave up on a message

A :class:`~rill.client.producer.SendResponse` that failed carries one of these, a
:class:`~rill.client.errors.BrokerError` (the broker refused the messages), or
:class:`~rill.client.errors.ConnectionClosed` (the connection broke after the request
was written: the messages may or may not have been appended).
"""

from __future__ import annotations

from rill.client.errors import BrokerError, ConnectionClosed, RillError


class ProducerTimeout(RillError, TimeoutError):
    """A wait ran out: ``get_offset(timeout)``, ``flush(timeout)``, or a message that was not
    acknowledged within ``request.timeout.ms`` (no broker reachable, no response)."""


class BufferFull(ProducerTimeout):
    """``send`` waited ``max.block.ms`` for room in ``buffer.memory`` and found none."""


class ProducerClosed(RillError):
    """The producer is closed: no more sends; messages still pending when ``close(timeout)``
    gave up fail with this error."""


def is_retriable(exc: BaseException) -> bool:
    """Whether sending the same messages again may succeed (it may also duplicate them)."""
    if isinstance(exc, BrokerError):
        return exc.retriable
    return isinstance(exc, (ConnectionClosed, ProducerTimeout)) and not isinstance(exc, BufferFull)
