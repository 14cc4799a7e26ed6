"""Where ACLs live: the :class:`AclStore` interface, the table of ACLs every store keeps, and an in-memory store.

A store holds a set of :class:`~rill.client.security.acls.AclBinding`: adding one that is
there already changes nothing, and listings come sorted (by resource, then entry). Its
subscribers are called after every change, whoever made it (this process, or another
one writing the same file or ZooKeeper), so that the broker's authorizer rebuilds its
index. The implementations:

- :class:`MemoryAclStore` (here): one process's ACLs, for tests and embedded brokers.
- :class:`~rill.client.security.acl_store_file.FileAclStore`: a single broker's, in
  ``<log.dir>/.security/acls.json``.
- :class:`~rill.client.security.acl_store_zk.ZkAclStore`: a cluster's, in ZooKeeper
  where Kafka keeps them.

Thread-safety: every store may be used from several threads; subscribers are called
on the thread that saw the change (the writer's, or the store's watcher thread) and
must not block for long.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Iterable

import structlog

from rill.client.security.acls import AccessControlEntry, AclBinding, AclBindingFilter, BindingList, ResourcePattern

__all__ = ["AclStore", "AclTable", "MemoryAclStore"]

log = structlog.get_logger(__name__)


class AclTable:
    """ACLs grouped by resource pattern: the in-memory state of every store.

    Not thread-safe: its store holds a lock around it.
    """

    __slots__ = ("_entries",)

    def __init__(self, bindings: Iterable[AclBinding] = ()) -> None:
        self._entries: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self.add(bindings)

    def add(self, bindings: Iterable[AclBinding]) -> BindingList:
        """Add ``bindings``; return those that were not there (in order, without repeats)."""
        added: BindingList = []
        for binding in bindings:
            current = self._entries.get(binding.pattern, frozenset())
            if binding.entry not in current:
                self._entries[binding.pattern] = current | {binding.entry}
                added.append(binding)
        return added

    def remove(self, acl_filter: AclBindingFilter) -> BindingList:
        """Remove the bindings ``acl_filter`` matches; return them, sorted (empty when none matched)."""
        removed: BindingList = []
        for pattern in [p for p in self._entries if acl_filter.matches_pattern(p)]:
            gone = {e for e in self._entries[pattern] if acl_filter.matches_entry(e)}
            if gone:
                self.replace(pattern, self._entries[pattern] - gone)
                removed += [AclBinding(pattern, e) for e in gone]
        return sorted(removed, key=AclBinding.sort_key)

    def replace(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> bool:
        """Make ``entries`` the whole set of ``pattern`` (none: forget the pattern). Returns whether it changed."""
        new = frozenset(entries)
        old = self._entries.get(pattern, frozenset())
        if new:
            self._entries[pattern] = new
        else:
            self._entries.pop(pattern, None)
        return new != old

    def entries(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        """The entries bound to ``pattern`` (empty when none)."""
        return self._entries.get(pattern, frozenset())

    def patterns(self) -> list[ResourcePattern]:
        """Every pattern with at least one entry."""
        return list(self._entries)

    def bindings(self) -> BindingList:
        """Every binding, sorted by :meth:`AclBinding.sort_key`."""
        return sorted((AclBinding(p, e) for p, entries in self._entries.items() for e in entries),
                      key=AclBinding.sort_key)


class AclStore(abc.ABC):
    """A set of ACLs that several threads (and, for the durable stores, processes) share, with change callbacks."""

    def __init__(self) -> None:
        self._subscribers: list[Callable[[], None]] = []
        self._subscribers_lock = threading.Lock()

    @abc.abstractmethod
    def add(self, bindings: Iterable[AclBinding]) -> BindingList:
        """Add ``bindings`` (durably, for a durable store) and tell the subscribers.

        Returns:
            The bindings that were not there already (empty: nothing changed, and nobody is told).
        """

    @abc.abstractmethod
    def remove(self, acl_filter: AclBindingFilter) -> BindingList:
        """Remove every binding ``acl_filter`` matches and tell the subscribers.

        Returns:
            What was removed, sorted (empty: nothing matched).
        """

    @abc.abstractmethod
    def all(self) -> BindingList:
        """Every binding, sorted by resource then entry (a copy: later changes do not show in it)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop watching for changes; later calls of the other methods are not supported. Idempotent."""

    def list(self, acl_filter: AclBindingFilter) -> BindingList:
        """The bindings ``acl_filter`` matches, sorted (empty when none)."""
        return [b for b in self.all() if acl_filter.matches(b)]

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` after every later change of the ACLs, this process's or another's.

        It is told that something changed, not what: it reads :meth:`all`. An exception
        it raises is logged and does not stop the others.
        """
        with self._subscribers_lock:
            self._subscribers.append(callback)

    def _changed(self) -> None:
        """Call every subscriber (after the new state is visible to :meth:`all`)."""
        with self._subscribers_lock:
            callbacks = list(self._subscribers)
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("acls.subscriber_failed", callback=repr(callback))


class MemoryAclStore(AclStore):
    """ACLs in this process's memory only: gone when it exits."""

    def __init__(self, bindings: Iterable[AclBinding] = ()) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._table = AclTable(bindings)

    def add(self, bindings: Iterable[AclBinding]) -> BindingList:
        with self._lock:
            added = self._table.add(bindings)
        if added:
            self._changed()
        return added

    def remove(self, acl_filter: AclBindingFilter) -> BindingList:
        with self._lock:
            removed = self._table.remove(acl_filter)
        if removed:
            self._changed()
        return removed

    def all(self) -> BindingList:
        with self._lock:
            return self._table.bindings()

    def close(self) -> None:
        """Nothing to stop: the ACLs stay readable."""
