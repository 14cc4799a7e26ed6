"""Per-group ordering locks.

A group's lock is held from the moment a handler (an RPC or a timer) computes its
records until they are persisted and applied, so the offsets log holds every
group's records in the order they were applied: replaying the log rebuilds the
same state. Lock order: a group lock first (several: in sorted order), then the
coordinator's own lock. The locks are re-entrant.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager


class GroupLocks:
    """One re-entrant lock per group name, created on first use."""

    def __init__(self) -> None:
        self._locks: dict[str, threading.RLock] = {}
        self._guard = threading.Lock()

    def _lock(self, group: str) -> threading.RLock:
        with self._guard:
            lock = self._locks.get(group)
            if lock is None:
                lock = self._locks[group] = threading.RLock()
            return lock

    @contextmanager
    def hold(self, *groups: str) -> Iterator[None]:
        """Hold the locks of ``groups`` (sorted, without duplicates, so no two holders deadlock)."""
        with ExitStack() as stack:
            for name in sorted(set(groups)):
                stack.enter_context(self._lock(name))
            yield

    @contextmanager
    def try_hold(self, group: str) -> Iterator[bool]:
        """Hold ``group``'s lock if it is free (or already held by this thread): yields whether it is held.

        Never waits: for callers that must not block (the aio server's event loop), which
        then do the work elsewhere when it yields False.
        """
        lock = self._lock(group)
        held = lock.acquire(blocking=False)
        try:
            yield held
        finally:
            if held:
                lock.release()
