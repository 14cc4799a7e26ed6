"""ACLs as values: who may do what, from where, to which resources (Kafka's model, KIP-11 and KIP-290).

An ACL (:class:`AclBinding`) says: principal P is Allowed or Denied operation O from host
H on the resources that pattern RP matches. The ``rill acls`` command, the ACL stores
(rill.client.security.acl_store and its file and ZooKeeper forms) and the broker's
authorizer all use these types.

- **Resources** are topics, groups and the cluster (whose one name is ``kafka-cluster``).
  A :class:`ResourcePattern` is ``LITERAL`` (one name, or ``*`` for every resource of the
  type) or ``PREFIXED`` (every name that begins with it). ``ANY`` and ``MATCH`` exist only
  in filters (:class:`AclBindingFilter`).
- **Names** are checked: a topic's by rill.client.topic_names (a prefix may be any
  1-249 of ``[A-Za-z0-9._-]``), a group's 1-255 printable characters without ``/``,
  never ``.`` or ``..`` (ZooKeeper keeps one node per name).
- **Principals** are ``Type:name`` (rill.client.security.principal; ``User:*`` is
  everyone), **hosts** an IP address (kept in its canonical form) or ``*``.

Text forms both ways: the enums parse case-insensitively, with or without ``_``
(``read``, ``Read``, ``READ``; ``ClusterAction``, ``cluster_action``), and ``str()`` gives
Kafka's ``kafka-acls`` output (``ResourcePattern(resourceType=TOPIC, name=t,
patternType=LITERAL)``, ``(principal=User:alice, host=*, operation=READ,
permissionType=ALLOW)``). JSON forms: :func:`entry_to_json` is Kafka's ZooKeeper entry
(``{"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host":
"*"}``) and :func:`binding_to_json` adds ``resourceType``, ``name`` and ``patternType``.

Every type here is immutable and hashable; constructing one validates it (``ValueError``).
"""

from __future__ import annotations

import enum
import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from rill.client.security import principal as principals
from rill.client.topic_names import is_valid_topic

__all__ = ["CLUSTER_NAME", "OPERATIONS_BY_RESOURCE", "WILDCARD_HOST", "WILDCARD_RESOURCE", "AccessControlEntry",
           "AclBinding", "AclBindingFilter", "BindingList", "Operation", "PatternType", "Permission",
           "ResourcePattern", "ResourceType", "binding_from_json", "binding_to_json", "by_pattern",
           "check_operation", "entry_from_json", "entry_to_json", "parse_host", "parse_principal", "validate_name"]

CLUSTER_NAME = "kafka-cluster"
WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"
MAX_GROUP_LENGTH = 255
_TOPIC_PREFIX = re.compile(r"[A-Za-z0-9._-]{1,249}\Z")

E = TypeVar("E", bound="_Parsed")


class _Parsed(enum.Enum):
    """An enum whose members parse from text case-insensitively, ignoring ``_``, ``-`` and blanks.

    Members hash by identity (they are singletons, and equal only to themselves): Enum's own
    ``__hash__`` is Python code, and the authorizer hashes these in every lookup.
    """

    __hash__ = object.__hash__

    @classmethod
    def parse(cls: type[E], text: str) -> E:
        """The member named ``text`` (``"read"``, ``"Read"``, ``"READ"``, ``"cluster_action"``).

        Raises:
            ValueError: no member has that name; the message lists the names.
        """
        wanted = re.sub(r"[\s_-]", "", str(text)).upper()
        for member in cls:
            if member.name.replace("_", "") == wanted:
                return member
        names = ", ".join(str(m.value) for m in cls)
        raise ValueError(f"unknown {cls.__name__} {text!r}: expected one of {names}")


class ResourceType(_Parsed):
    """What an ACL protects. The value is Kafka's spelling, used in ZooKeeper paths (``/kafka-acl/Topic``)."""

    TOPIC = "Topic"
    GROUP = "Group"
    CLUSTER = "Cluster"


class PatternType(_Parsed):
    """How a pattern's name matches resource names. ANY and MATCH are for filters only (:class:`AclBindingFilter`)."""

    LITERAL = "LITERAL"    # the name itself; "*" is every resource of the type
    PREFIXED = "PREFIXED"  # every name beginning with it
    ANY = "ANY"            # filter: a pattern of any type with exactly this name
    MATCH = "MATCH"        # filter: every pattern that applies to this (literal) name


class Operation(_Parsed):
    """What a principal does to a resource; ALL in an ACL matches every operation. Values as Kafka spells them."""

    ALL = "All"
    READ = "Read"
    WRITE = "Write"
    CREATE = "Create"
    DELETE = "Delete"
    ALTER = "Alter"
    DESCRIBE = "Describe"
    CLUSTER_ACTION = "ClusterAction"
    DESCRIBE_CONFIGS = "DescribeConfigs"
    ALTER_CONFIGS = "AlterConfigs"


class Permission(_Parsed):
    """Whether a matching ACL allows or denies. A matching DENY always wins."""

    ALLOW = "Allow"
    DENY = "Deny"


OPERATIONS_BY_RESOURCE: Mapping[ResourceType, frozenset[Operation]] = {
    ResourceType.TOPIC: frozenset({Operation.ALL, Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE,
                                   Operation.ALTER, Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS,
                                   Operation.ALTER_CONFIGS}),
    # Kafka's groups know Read, Describe and Delete; rill's also Alter (a rewind), and Create is accepted in ACLs
    ResourceType.GROUP: frozenset({Operation.ALL, Operation.READ, Operation.DESCRIBE, Operation.DELETE,
                                   Operation.CREATE, Operation.ALTER}),
    ResourceType.CLUSTER: frozenset({Operation.ALL, Operation.CREATE, Operation.ALTER, Operation.DESCRIBE,
                                     Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}
"""The operations that mean something on each resource type (``kafka-acls`` refuses the others)."""


def check_operation(resource_type: ResourceType, operation: Operation) -> Operation:
    """Return ``operation`` if a request can check it on ``resource_type``.

    Raises:
        ValueError: it never applies there (Write on a group, say); the message lists those that do.
    """
    allowed = OPERATIONS_BY_RESOURCE[resource_type]
    if operation not in allowed:
        names = ", ".join(sorted(op.value for op in allowed))
        raise ValueError(f"operation {operation.value} does not apply to a {resource_type.value}: use {names}")
    return operation


def validate_name(resource_type: ResourceType, name: str, pattern_type: PatternType) -> str:
    """Return ``name`` if it can name resources of ``resource_type`` with ``pattern_type`` (LITERAL or PREFIXED).

    Raises:
        ValueError: an illegal name, with the rule it breaks.
    """
    if not isinstance(name, str) or name in (".", ".."):
        raise ValueError(f"invalid resource name {name!r}")
    literal = pattern_type is PatternType.LITERAL
    if resource_type is ResourceType.CLUSTER:
        if name != CLUSTER_NAME or not literal:
            raise ValueError(f"the cluster resource is the literal name {CLUSTER_NAME!r}, got {name!r} "
                             f"({pattern_type.value})")
    elif literal and name == WILDCARD_RESOURCE:
        return name  # every topic or group
    elif resource_type is ResourceType.TOPIC:
        if not (is_valid_topic(name) if literal else _TOPIC_PREFIX.match(name)):
            raise ValueError(f"invalid topic {'name' if literal else 'prefix'} {name!r}: use 1-249 of "
                             "[A-Za-z0-9._-] (or * for every topic)")
    elif not (0 < len(name) <= MAX_GROUP_LENGTH and name.isprintable() and "/" not in name):
        raise ValueError(f"invalid group {'name' if literal else 'prefix'} {name!r}: use 1-{MAX_GROUP_LENGTH} "
                         "printable characters without '/' (or * for every group)")
    return name


def parse_principal(text: str) -> str:
    """``"User:alice"`` -> ``"User:alice"``, checked (``User:*`` is every principal).

    Raises:
        ValueError: not ``Type:name``.
    """
    principals.parse(text)
    return text


def parse_host(text: str) -> str:
    """``"*"`` or an IP address in its canonical form (``"0:0::1"`` -> ``"::1"``).

    Host names are refused: the broker compares an ACL's host with the client's address.

    Raises:
        ValueError: neither ``*`` nor an IP address.
    """
    if text == WILDCARD_HOST:
        return text
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise ValueError(f"a host is an IP address or *, got {text!r}") from None


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """The resources an ACL applies to.

    Attributes:
        type: topic, group or cluster.
        name: a name, ``*`` (LITERAL: every resource of the type) or a prefix (PREFIXED).
        pattern_type: LITERAL or PREFIXED.
    """

    type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __post_init__(self) -> None:
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise ValueError(f"a resource pattern is LITERAL or PREFIXED, not {self.pattern_type.value} "
                             "(ANY and MATCH are for filters)")
        validate_name(self.type, self.name, self.pattern_type)

    @property
    def is_wildcard(self) -> bool:
        """The literal ``*``: every resource of the type."""
        return self.pattern_type is PatternType.LITERAL and self.name == WILDCARD_RESOURCE

    def __str__(self) -> str:
        return (f"ResourcePattern(resourceType={self.type.name}, name={self.name}, "
                f"patternType={self.pattern_type.name})")


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """Who, from where, what, and whether: the half of an ACL that is not the resource.

    Attributes:
        principal: ``Type:name``; ``User:*`` matches every principal.
        host: a client's IP address (canonical form) or ``*`` for any.
        operation: the operation allowed or denied; ALL is every operation.
        permission: ALLOW or DENY.
    """

    principal: str
    host: str
    operation: Operation
    permission: Permission

    def __post_init__(self) -> None:
        parse_principal(self.principal)
        object.__setattr__(self, "host", parse_host(self.host))
        if not isinstance(self.operation, Operation) or not isinstance(self.permission, Permission):
            raise ValueError(f"operation and permission must be enum members, got {self.operation!r}, "
                             f"{self.permission!r}")

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
                f"permissionType={self.permission.name})")


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: an entry bound to a resource pattern."""

    pattern: ResourcePattern
    entry: AccessControlEntry

    def __str__(self) -> str:
        return f"{self.pattern}: {self.entry}"

    def sort_key(self) -> tuple[str, str, str, str, str, str, str]:
        """Orders listings: by resource type, pattern type, name, then principal, permission, operation, host."""
        p, e = self.pattern, self.entry
        return (p.type.value, p.pattern_type.value, p.name, e.principal, e.permission.value, e.operation.value, e.host)


BindingList = list[AclBinding]  # an alias: stores have a method named ``list``


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which ACLs to list or remove; a field left None (or pattern_type ANY) matches anything.

    With a ``name``, ``pattern_type`` ANY matches patterns of any type with exactly that
    name, and MATCH every pattern that applies to the resource of that literal name: the
    name itself, the ``*`` wildcard, and each prefix of it (Kafka's
    ``ResourcePatternFilter``). ``operation`` ALL matches only entries of operation ALL.
    """

    resource_type: ResourceType | None = None
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation | None = None
    permission: Permission | None = None

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type is not None and self.resource_type is not pattern.type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, pattern.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type is not PatternType.MATCH:
            return self.name == pattern.name
        if pattern.pattern_type is PatternType.LITERAL:
            return pattern.name in (self.name, WILDCARD_RESOURCE)
        return self.name.startswith(pattern.name)

    def matches_entry(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and (self.operation is None or self.operation is entry.operation)
                and (self.permission is None or self.permission is entry.permission))

    def __str__(self) -> str:
        kind = "ANY" if self.resource_type is None else self.resource_type.name
        name = "<any>" if self.name is None else self.name
        return f"ResourcePattern(resourceType={kind}, name={name}, patternType={self.pattern_type.name})"


def by_pattern(bindings: Iterable[AclBinding]) -> dict[ResourcePattern, list[AccessControlEntry]]:
    """The bindings' entries grouped by resource pattern, both in :meth:`AclBinding.sort_key` order."""
    grouped: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for binding in sorted(bindings, key=AclBinding.sort_key):
        grouped.setdefault(binding.pattern, []).append(binding.entry)
    return grouped


def entry_to_json(entry: AccessControlEntry) -> dict[str, str]:
    """Kafka's ZooKeeper form of an entry: principal, permissionType, operation, host."""
    return {"principal": entry.principal, "permissionType": entry.permission.value,
            "operation": entry.operation.value, "host": entry.host}


def _field(obj: Mapping[str, object], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise ValueError(f"an ACL needs a string {key!r}, got {value!r}")
    return value


def entry_from_json(obj: object) -> AccessControlEntry:
    """The inverse of :func:`entry_to_json`.

    Raises:
        ValueError: not an object with those four string fields, or a field is invalid.
    """
    if not isinstance(obj, Mapping):
        raise ValueError(f"an ACL entry is a JSON object, got {obj!r}")
    return AccessControlEntry(parse_principal(_field(obj, "principal")), _field(obj, "host"),
                              Operation.parse(_field(obj, "operation")),
                              Permission.parse(_field(obj, "permissionType")))


def binding_to_json(binding: AclBinding) -> dict[str, str]:
    """``{"resourceType": "Topic", "name": ..., "patternType": "LITERAL", ...entry_to_json}``."""
    pattern = binding.pattern
    return {"resourceType": pattern.type.value, "name": pattern.name, "patternType": pattern.pattern_type.value,
            **entry_to_json(binding.entry)}


def binding_from_json(obj: object) -> AclBinding:
    """The inverse of :func:`binding_to_json`.

    Raises:
        ValueError: a field is missing or invalid.
    """
    if not isinstance(obj, Mapping):
        raise ValueError(f"an ACL is a JSON object, got {obj!r}")
    pattern = ResourcePattern(ResourceType.parse(_field(obj, "resourceType")), _field(obj, "name"),
                              PatternType.parse(_field(obj, "patternType")))
    return AclBinding(pattern, entry_from_json(obj))
