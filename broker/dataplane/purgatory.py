"""Requests parked under the partitions they wait on (Kafka's DelayedOperationPurgatory, in small).

A long-poll fetch (consumers' FETCH_WAIT, followers' REPLICA_FETCH) that finds too little
data is parked under each ``(topic, partition)`` it reads, with a timer for its deadline;
an append (or a new high watermark, or a role change) looks up who waits on that
partition. :class:`Purgatory` keeps that bookkeeping once: parking, the timer, finding
the waiters of a key, and taking a request out of every key exactly once.

Everything runs on the broker's event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from rill.broker.dataplane.storage import Loop
from rill.client.net.timer_heap import Timer

__all__ = ["Parked", "Purgatory"]

Key = tuple[str, int]
R = TypeVar("R")


class Parked(Generic[R]):
    """One parked request: what it is (``request``), the keys it waits on, its deadline timer."""

    __slots__ = ("request", "keys", "timer", "done")

    def __init__(self, request: R, keys: tuple[Key, ...]) -> None:
        self.request = request
        self.keys = keys
        self.timer: Timer | None = None
        self.done = False


class Purgatory(Generic[R]):
    """Parked requests by key; the caller decides when one is satisfied and answers it."""

    def __init__(self, loop: Loop) -> None:
        self.loop = loop
        self._waiting: dict[Key, list[Parked[R]]] = {}

    def park(self, request: R, keys: Iterable[Key], wait_ms: int, expire: Callable[[Parked[R]], None]) -> Parked[R]:
        """Park ``request`` under ``keys``; ``expire(parked)`` runs at the deadline unless it was taken first."""
        parked = Parked(request, tuple(keys))
        for key in parked.keys:
            self._waiting.setdefault(key, []).append(parked)
        parked.timer = self.loop.call_later(wait_ms / 1000.0, lambda: expire(parked))
        return parked

    def waiting(self, key: Key) -> list[Parked[R]]:
        """The requests parked under ``key`` and not taken yet (a copy: taking them while iterating is safe)."""
        return [p for p in self._waiting.get(key, ()) if not p.done]

    def take(self, parked: Parked[R]) -> bool:
        """Take ``parked`` out of every key and cancel its timer; False if it was taken already."""
        if parked.done:
            return False
        parked.done = True
        if parked.timer is not None:
            parked.timer.cancel()
        for key in parked.keys:
            waiters = self._waiting.get(key)
            if waiters and parked in waiters:
                waiters.remove(parked)
                if not waiters:
                    del self._waiting[key]
        return True
