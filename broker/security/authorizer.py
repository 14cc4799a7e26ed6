"""The broker's authorizer: may this principal, from this host, do this operation to this resource?

Kafka's rules (``AclAuthorizer``, ``StandardAuthorizerData``), exactly:

1. A super user (``super.users``) may do everything.
2. The ACLs that *match* a resource are its literal ones, the ``*`` wildcard of its type,
   and every prefixed one that its name begins with. An entry applies to a request when
   its principal is the request's or ``User:*``, its host the client's address or ``*``,
   and its operation the one asked or ALL.
3. With no matching ACL at all (for any principal), the answer is
   ``allow.everyone.if.no.acl.found`` (default false). A single ACL, for anyone, closes
   the resource to everyone else.
4. Otherwise any applying DENY refuses; else an applying ALLOW is needed, where an allow
   of Read, Write, Delete or Alter also allows Describe, and AlterConfigs allows
   DescribeConfigs (only allows imply: a deny of Describe denies Describe alone).

Fast on the hot path: :meth:`Authorizer.authorize` reads an immutable index, rebuilt
from the store after every change (the store's subscription) and swapped in as one
attribute, so that threads calling it (the data plane, the gRPC servicers) see the old
ACLs or the new, never half. The index holds each pattern's entries grouped by
principal; literal patterns are a dict by (type, name), the wildcard one by type, and
prefixed ones a dict by prefix per type, probed once for each distinct prefix length
that type has, so a lookup never scans unrelated ACLs. Answers are cached in the index
(bounded; a new index starts empty), so a repeated question costs one dict lookup.

Denials are logged at debug (the request layers write the audit line, ``rill.audit``,
for every refusal): once per distinct question and index, since later answers come from
the cache.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import structlog

from rill.client.security.acl_store import AclStore
from rill.client.security.acls import (AccessControlEntry, AclBinding, AclBindingFilter, BindingList, Operation,
                                       PatternType, Permission, ResourceType, parse_principal)
from rill.client.security.principal import WILDCARD

__all__ = ["Authorizer", "parse_super_users"]

log = structlog.get_logger(__name__)

CACHE_LIMIT = 16384  # answers kept per index; when full, the cache starts again empty

_DESCRIBE_BY = frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER})
_ALLOWED_BY: Mapping[Operation, frozenset[Operation]] = {
    op: (_DESCRIBE_BY if op is Operation.DESCRIBE
         else frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}) if op is Operation.DESCRIBE_CONFIGS
         else frozenset({op})) | {Operation.ALL}
    for op in Operation}
"""For each operation asked, the operations of ALLOW entries that grant it."""


def parse_super_users(value: str) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (DNs contain commas), as Kafka's.

    ``"User:Bob;User:Alice"`` -> ``{"User:Bob", "User:Alice"}``; blanks around each and
    empty items are ignored.

    Raises:
        ValueError: an item is not ``Type:name``.
    """
    return frozenset(parse_principal(item.strip()) for item in value.split(";") if item.strip())


_Grouped = Mapping[str, tuple[AccessControlEntry, ...]]  # a pattern's entries by principal


def _group(entries: Iterable[AccessControlEntry]) -> dict[str, tuple[AccessControlEntry, ...]]:
    grouped: dict[str, list[AccessControlEntry]] = {}
    for entry in entries:
        grouped.setdefault(entry.principal, []).append(entry)
    return {principal: tuple(items) for principal, items in grouped.items()}


@dataclass
class _Prefixes:
    """One resource type's prefixed patterns: entries by prefix, and the distinct prefix lengths."""

    by_prefix: dict[str, _Grouped] = field(default_factory=dict)
    lengths: tuple[int, ...] = ()


class _Index:
    """The ACLs as :meth:`Authorizer.authorize` reads them. Immutable once built, except its answer cache."""

    __slots__ = ("cache", "count", "literal", "prefixed", "wildcard")

    def __init__(self, bindings: Iterable[AclBinding]) -> None:
        by_pattern: dict[tuple[ResourceType, PatternType, str], list[AccessControlEntry]] = {}
        for b in bindings:
            by_pattern.setdefault((b.pattern.type, b.pattern.pattern_type, b.pattern.name), []).append(b.entry)
        self.count = sum(map(len, by_pattern.values()))
        self.literal: dict[tuple[ResourceType, str], _Grouped] = {}
        self.wildcard: dict[ResourceType, _Grouped] = {}
        self.prefixed: dict[ResourceType, _Prefixes] = {}
        for (kind, pattern_type, name), entries in by_pattern.items():
            grouped = _group(entries)
            if pattern_type is PatternType.PREFIXED:
                self.prefixed.setdefault(kind, _Prefixes()).by_prefix[name] = grouped
            elif name == "*":
                self.wildcard[kind] = grouped
            else:
                self.literal[(kind, name)] = grouped
        for prefixes in self.prefixed.values():
            prefixes.lengths = tuple(sorted({len(p) for p in prefixes.by_prefix}))
        self.cache: dict[tuple[str, str, Operation, ResourceType, str], bool] = {}

    def matching(self, kind: ResourceType, name: str) -> list[_Grouped]:
        """The entries (grouped by principal) of every pattern that matches the resource (empty: no ACL)."""
        found = []
        literal = self.literal.get((kind, name))
        if literal is not None:
            found.append(literal)
        wildcard = self.wildcard.get(kind)
        if wildcard is not None:
            found.append(wildcard)
        prefixes = self.prefixed.get(kind)
        if prefixes is not None:
            for length in prefixes.lengths:
                if length > len(name):
                    break
                grouped = prefixes.by_prefix.get(name[:length])
                if grouped is not None:
                    found.append(grouped)
        return found


def _decide(matching: list[_Grouped], principal: str, host: str, operation: Operation) -> bool:
    """Rule 4: no applying DENY, and an applying ALLOW (with implied operations)."""
    granting = _ALLOWED_BY[operation]
    allowed = False
    for grouped in matching:
        for who in (principal, WILDCARD):
            for entry in grouped.get(who, ()):
                if entry.host != "*" and entry.host != host:
                    continue
                if entry.permission is Permission.DENY:
                    if entry.operation is operation or entry.operation is Operation.ALL:
                        return False
                elif entry.operation in granting:
                    allowed = True
    return allowed


class Authorizer:
    """Answers authorization questions from the ACLs of ``store``, following its changes.

    Args:
        store: the ACLs; the authorizer subscribes to it (it does not close it).
        super_users: principals allowed everything (see :func:`parse_super_users`).
        allow_everyone_if_no_acl_found: Kafka's ``allow.everyone.if.no.acl.found``.

    Thread-safe: any thread may call :meth:`authorize` while the store changes.
    """

    def __init__(self, store: AclStore, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self._store = store
        self._super_users = frozenset(parse_principal(p) for p in super_users)
        self._allow_if_none = allow_everyone_if_no_acl_found
        self._rebuild_lock = threading.Lock()
        self._index = _Index(())
        store.subscribe(self._rebuild)
        self._rebuild()

    def authorize(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                  name: str) -> bool:
        """Whether ``principal`` connected from ``host`` (an IP address) may do ``operation`` to the resource
        ``resource_type``/``name`` (the cluster's name is ``kafka-cluster``)."""
        if principal in self._super_users:
            return True
        index = self._index  # one read: the whole question is answered from one index
        key = (principal, host, operation, resource_type, name)
        answer = index.cache.get(key)
        if answer is None:
            matching = index.matching(resource_type, name)
            answer = self._allow_if_none if not matching else _decide(matching, principal, host, operation)
            if len(index.cache) >= CACHE_LIMIT:
                index.cache.clear()
            index.cache[key] = answer
            if not answer:
                log.debug("acl.denied", principal=principal, host=host, operation=operation.name,
                         resource_type=resource_type.name, resource=name, acls_found=bool(matching))
        return answer

    def is_super_user(self, principal: str) -> bool:
        return principal in self._super_users

    def acls_for(self, acl_filter: AclBindingFilter) -> BindingList:
        """The store's ACLs that ``acl_filter`` matches, sorted (for the admin API's DescribeAcls)."""
        return self._store.list(acl_filter)

    @property
    def acl_count(self) -> int:
        """How many ACLs the current index holds."""
        return self._index.count

    def _rebuild(self) -> None:
        """Build a new index from the store and swap it in (subscriber; also run once at start)."""
        with self._rebuild_lock:  # rebuilds in order: the last one installed read the newest ACLs
            index = _Index(self._store.all())
            self._index = index
        log.info("acl.index_rebuilt", acls=index.count)
