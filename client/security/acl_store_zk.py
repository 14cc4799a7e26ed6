"""A cluster's ACLs in ZooKeeper, where Kafka keeps them (``ZkData.scala``; KIP-290 for prefixed ones).

Layout (one node per resource pattern, its entries as Kafka writes them)::

    /kafka-acl/<Topic|Group|Cluster>/<name>                  literal patterns ("*" included)
    /kafka-acl-extended/prefixed/<Topic|Group|Cluster>/<prefix>  prefixed patterns
        -> {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
                                  "operation":"Read","host":"*"}]}
    /kafka-acl-changes/acl_changes_<seq>           a literal pattern changed: "Topic:orders"
    /kafka-acl-extended-changes/acl_changes_<seq>  a prefixed one: {"version":1,"resourceType":"Topic",
                                                    "name":"ord","patternType":"PREFIXED"}

Old brokers read only ``/kafka-acl``, so they never see prefixed ACLs (KIP-290's reason
for the second tree).

Every store keeps all ACLs in memory, read once at start. A writer changes a pattern's
node with a conditional update (create, or set or delete at the version it read; at
most ``max_retries`` tries, with a short random back-off), deletes a node left without
entries, then writes a change notification. Every store watches both notification
directories (kazoo ``ChildrenWatch``): on a new notification it reads the named node
again and calls its subscribers, so a change applies at once on every broker. After a
lost session it reads everything again (notifications may have been purged meanwhile).
Writers delete notifications older than 15 minutes, as Kafka's brokers do.

The store does not own the KazooClient: the broker's (or the command's) connection,
started, whose chroot holds the cluster. Thread-safe.
"""

from __future__ import annotations

import functools
import json
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from rill.client.errors import RillError
from rill.client.security.acl_store import AclStore, AclTable
from rill.client.security.acls import (AccessControlEntry, AclBinding, AclBindingFilter, BindingList, PatternType,
                                       ResourcePattern, ResourceType, entry_from_json, entry_to_json)

__all__ = ["AclUpdateConflict", "LITERAL_TREE", "PREFIXED_TREE", "ZkAclStore"]

log = structlog.get_logger(__name__)

CHANGE_PREFIX = "acl_changes_"
NOTIFICATION_LIFETIME_S = 15 * 60
NODE_VERSION = 1

_Entries = frozenset[AccessControlEntry]


class AclUpdateConflict(RillError):
    """Other writers changed a pattern's node every time this one tried (``max_retries`` times)."""


@dataclass(frozen=True)
class AclTree:
    """Where the ACLs of one pattern type live, and how their change notifications are written."""

    pattern_type: PatternType
    root: str     # /root/<ResourceType>/<name> holds a pattern's entries
    changes: str  # sequential notification nodes

    def node(self, pattern: ResourcePattern) -> str:
        return f"{self.root}/{pattern.type.value}/{pattern.name}"

    def encode_change(self, pattern: ResourcePattern) -> bytes:
        if self.pattern_type is PatternType.LITERAL:
            return f"{pattern.type.value}:{pattern.name}".encode()
        return json.dumps({"version": 1, "resourceType": pattern.type.value, "name": pattern.name,
                           "patternType": pattern.pattern_type.value}, separators=(",", ":")).encode()

    def decode_change(self, data: bytes) -> ResourcePattern:
        """The pattern a notification names.

        Raises:
            ValueError: not a notification this tree writes, or an unknown resource type.
        """
        text = data.decode()
        if self.pattern_type is PatternType.LITERAL:
            kind, sep, name = text.partition(":")
            if not sep:
                raise ValueError(f"expected ResourceType:name, got {text!r}")
            return ResourcePattern(ResourceType.parse(kind), name, PatternType.LITERAL)
        doc = json.loads(text)
        if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
            raise ValueError(f"expected a KIP-290 change event, got {text!r}")
        return ResourcePattern(ResourceType.parse(str(doc.get("resourceType"))), doc["name"],
                               PatternType.parse(str(doc.get("patternType"))))


LITERAL_TREE = AclTree(PatternType.LITERAL, "/kafka-acl", "/kafka-acl-changes")
PREFIXED_TREE = AclTree(PatternType.PREFIXED, "/kafka-acl-extended/prefixed", "/kafka-acl-extended-changes")
TREES = {t.pattern_type: t for t in (LITERAL_TREE, PREFIXED_TREE)}


def encode_node(entries: Iterable[AccessControlEntry]) -> bytes:
    """A pattern node's value: ``{"version":1,"acls":[...]}``, entries sorted."""
    acls = sorted((entry_to_json(e) for e in entries), key=lambda d: tuple(d.values()))
    return json.dumps({"version": NODE_VERSION, "acls": acls}, separators=(",", ":")).encode()


def decode_node(data: bytes) -> _Entries:
    """The entries of a pattern node (empty value: none).

    Raises:
        ValueError: not ``{"version":1,"acls":[...]}`` with valid entries.
    """
    if not data:
        return frozenset()
    doc = json.loads(data)
    if not isinstance(doc, dict) or not isinstance(doc.get("acls"), list):
        raise ValueError(f"expected {{\"version\":1,\"acls\":[...]}}, got {data[:200]!r}")
    return frozenset(entry_from_json(item) for item in doc["acls"])


def _sequence(child: str) -> int:
    try:
        return int(child[len(CHANGE_PREFIX):]) if child.startswith(CHANGE_PREFIX) else -1
    except ValueError:
        return -1


class ZkAclStore(AclStore):
    """The ACLs in the ZooKeeper that ``zk`` (started) is connected to.

    Args:
        zk: a started client; the store creates the paths above if missing.
        watch: follow other writers' changes (a broker); False for a command that reads or writes once.
        max_retries: tries of a conditional update before :class:`AclUpdateConflict`.

    Raises:
        ValueError: a pattern node holds something that is not ACLs (the message names it).
        kazoo.exceptions.KazooException: ZooKeeper failed.
    """

    def __init__(self, zk: KazooClient, *, watch: bool = True, max_retries: int = 10,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self._zk = zk
        self._max_retries = max_retries
        self._clock = clock
        self._lock = threading.Lock()          # guards _table
        self._refresh_lock = threading.RLock()  # one reader of notifications at a time
        self._closed = False
        self._session_lost = False
        for tree in TREES.values():
            zk.ensure_path(tree.changes)
            for kind in ResourceType:
                zk.ensure_path(f"{tree.root}/{kind.value}")
        self._seen: dict[PatternType, int] = {}
        self._table = self._load_all()
        if watch:
            zk.add_listener(self._on_state)
            for tree in TREES.values():
                ChildrenWatch(zk, tree.changes, functools.partial(self._on_changes, tree))

    # --- reading ----------------------------------------------------------------------

    def all(self) -> BindingList:
        with self._lock:
            return self._table.bindings()

    def _load_all(self) -> AclTable:
        """Every pattern node, read after noting the newest notifications (later ones are read again)."""
        for tree in TREES.values():
            self._seen[tree.pattern_type] = max(map(_sequence, self._zk.get_children(tree.changes)), default=-1)
        pending = []
        for tree in TREES.values():
            for kind in ResourceType:
                for name in self._zk.get_children(f"{tree.root}/{kind.value}"):
                    pattern = ResourcePattern(kind, name, tree.pattern_type)
                    pending.append((pattern, tree.node(pattern), self._zk.get_async(tree.node(pattern))))
        table = AclTable()
        for pattern, path, result in pending:
            try:
                data = result.get()[0]
            except NoNodeError:
                continue
            try:
                table.replace(pattern, decode_node(data))
            except ValueError as exc:
                raise ValueError(f"ZooKeeper node {path}: {exc}") from exc
        return table

    def _fetch(self, tree: AclTree, pattern: ResourcePattern) -> tuple[_Entries, int | None]:
        """A pattern's entries and node version (None: no node)."""
        try:
            data, stat = self._zk.get(tree.node(pattern))
        except NoNodeError:
            return frozenset(), None
        return decode_node(data), stat.version

    def _on_changes(self, tree: AclTree, children: list[str]) -> bool:
        """ChildrenWatch callback: read again the patterns the new notifications name, then tell the subscribers."""
        if self._closed:
            return False
        with self._refresh_lock:
            fresh = sorted((c for c in children if _sequence(c) > self._seen[tree.pattern_type]), key=_sequence)
            changed = False
            for child in fresh:
                changed |= self._apply_notification(tree, child)
                self._seen[tree.pattern_type] = _sequence(child)
        if changed:
            self._changed()
        return True

    def _apply_notification(self, tree: AclTree, child: str) -> bool:
        path = f"{tree.changes}/{child}"
        try:
            pattern = tree.decode_change(self._zk.get(path)[0])
            entries, _ = self._fetch(tree, pattern)
        except NoNodeError:
            return False  # purged already: a notification that old was read long ago
        except ValueError as exc:
            log.error("acls.zk_bad_change", path=path, error=str(exc), keeping="the ACLs read before")
            return False
        with self._lock:
            return self._table.replace(pattern, entries)

    def _on_state(self, state: str) -> None:
        """Session listener (on kazoo's connection thread, so it only notes and hands off)."""
        if state == KazooState.LOST:
            self._session_lost = True
        elif state == KazooState.CONNECTED and self._session_lost and not self._closed:
            self._session_lost = False
            self._zk.handler.spawn(self.reload)

    def reload(self) -> None:
        """Read every ACL again and tell the subscribers (after a lost session: notifications may be gone)."""
        with self._refresh_lock:
            try:
                table = self._load_all()
            except Exception as exc:
                log.error("acls.zk_reload_failed", error=str(exc), keeping="the ACLs read before")
                return
            with self._lock:
                self._table = table
        log.info("acls.zk_reloaded", acls=len(table.bindings()))
        self._changed()

    # --- writing ----------------------------------------------------------------------

    def add(self, bindings: Iterable[AclBinding]) -> BindingList:
        wanted: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for binding in bindings:
            wanted.setdefault(binding.pattern, set()).add(binding.entry)
        added: BindingList = []
        for pattern, entries in wanted.items():
            before, after = self._update(pattern, frozenset(entries).union)
            added += sorted((AclBinding(pattern, e) for e in after - before), key=AclBinding.sort_key)
        if added:
            self._changed()
        return added

    def remove(self, acl_filter: AclBindingFilter) -> BindingList:
        with self._lock:
            patterns = [p for p in self._table.patterns() if acl_filter.matches_pattern(p)]
        removed: BindingList = []
        for pattern in patterns:
            before, after = self._update(
                pattern, lambda current: frozenset(e for e in current if not acl_filter.matches_entry(e)))
            removed += [AclBinding(pattern, e) for e in before - after]
        if removed:
            self._changed()
        return sorted(removed, key=AclBinding.sort_key)

    def _update(self, pattern: ResourcePattern, change: Callable[[_Entries], _Entries]) -> tuple[_Entries, _Entries]:
        """Apply ``change`` to a pattern's node conditionally, announce it, and adopt the result.

        Returns:
            The entries before and after (equal: nothing to do, nothing written).

        Raises:
            AclUpdateConflict: every try lost a race.
        """
        tree = TREES[pattern.pattern_type]
        path = tree.node(pattern)
        for attempt in range(self._max_retries):
            current, version = self._fetch(tree, pattern)
            new = change(current)
            if new != current and not self._write_node(path, new, version):
                time.sleep(random.uniform(0.0, 0.01 * (attempt + 1)))
                continue
            with self._lock:
                self._table.replace(pattern, new)
            if new != current:
                self._notify(tree, pattern)
            return current, new
        raise AclUpdateConflict(f"ACLs of {pattern} not changed: other writers changed {path} on each of "
                                f"{self._max_retries} tries")

    def _write_node(self, path: str, entries: _Entries, version: int | None) -> bool:
        """Create, set or (no entries left) delete the node, if it is still at ``version`` (None: absent).

        Returns:
            False when another writer got there first (read again and retry).
        """
        try:
            if version is None:
                self._zk.create(path, encode_node(entries), makepath=True)
            elif entries:
                self._zk.set(path, encode_node(entries), version=version)
            else:
                self._zk.delete(path, version=version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            return False
        return True

    def _notify(self, tree: AclTree, pattern: ResourcePattern) -> None:
        """Write the change notification every store watches, and purge earlier ones older than 15 minutes."""
        created = self._zk.create(f"{tree.changes}/{CHANGE_PREFIX}", tree.encode_change(pattern), sequence=True)
        log.info("acls.zk_changed", node=tree.node(pattern))
        own = _sequence(created.rsplit("/", 1)[-1])
        children = [c for c in self._zk.get_children(tree.changes) if _sequence(c) < own]
        stats = [(c, self._zk.exists_async(f"{tree.changes}/{c}")) for c in children]
        cutoff_ms = (self._clock() - NOTIFICATION_LIFETIME_S) * 1000
        for child, result in stats:
            stat = result.get()
            if stat is not None and stat.ctime < cutoff_ms:
                self._zk.delete_async(f"{tree.changes}/{child}")

    def close(self) -> None:
        """Stop following changes (the watches end at their next event); the client stays open."""
        self._closed = True
        self._zk.remove_listener(self._on_state)
