"""Settings per user and per client id, Kafka's ``/config/<entity-type>/<name>`` model.

An *entity* is named by its path::

    users/<user>                      users/<default>
    clients/<client-id>               clients/<default>
    users/<user>/clients/<client-id>  users/<default>/clients/<default>  (and the mixes)

and holds string settings. A user's SCRAM credentials are keys of its entity
(``SCRAM-SHA-256`` -> ``salt=...,stored_key=...,server_key=...,iterations=n``); quotas are
other keys of the same entities (``producer_byte_rate``, ``consumer_byte_rate``,
``request_percentage``), so every write names the keys it sets and deletes and keeps the
rest. An entity left with no keys disappears.

User names and client ids are 1..255 printable characters without ``/``, not ``.`` or
``..``, and within what ZooKeeper takes in a node name (no character above U+FFEF);
``<default>`` names the default entity of its type.

:class:`EntityConfigs` is the interface; the implementations keep an in-memory copy
(:class:`SnapshotEntityConfigs`) so that reads, on every authentication and every request a
quota checks, never touch a disk or ZooKeeper:

- :class:`MemoryEntityConfigs` (here): for tests.
- ``FileEntityConfigs`` (entity_configs_file): one JSON file in a broker's log.dir.
- ``ZkEntityConfigs`` (entity_configs_zk): Kafka's ZooKeeper layout, for a cluster.

Subscribers are called with an entity's path after it changed, by this process or another,
on the writer's thread or the store's watcher thread; they must be quick and must not call
``alter``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Protocol

import structlog

from rill.client.errors import RillError

__all__ = ["CLIENTS", "DEFAULT", "ENTITY_TYPES", "USERS", "EntityConfigError", "EntityConfigs",
           "MemoryEntityConfigs", "SnapshotEntityConfigs", "altered", "entity_path", "parse_entity",
           "validate_name"]

log = structlog.get_logger(__name__)

USERS = "users"
CLIENTS = "clients"
ENTITY_TYPES = (USERS, CLIENTS)
DEFAULT = "<default>"
MAX_NAME_LENGTH = 255
NO_CHANGES: Mapping[str, str] = MappingProxyType({})

Snapshot = Mapping[str, Mapping[str, str]]


class EntityConfigError(RillError, ValueError):
    """A bad entity path, name or key, an unreadable store, or a write that could not be made."""


def validate_name(name: str, what: str = "name") -> str:
    """``name`` if it may name a user or client id (``<default>`` included).

    Raises:
        EntityConfigError: empty, over 255 characters, unprintable, containing ``/``, ``.`` or
            ``..``, or a character ZooKeeper refuses in a node name (above U+FFEF).
    """
    if (not 1 <= len(name) <= MAX_NAME_LENGTH or not name.isprintable() or "/" in name or name in (".", "..")
            or any(ord(c) >= 0xFFF0 for c in name)):
        raise EntityConfigError(f"invalid {what} {name!r}: use 1..{MAX_NAME_LENGTH} printable characters, "
                                f"no '/', not '.' or '..'")
    return name


def entity_path(user: str | None = None, client: str | None = None) -> str:
    """``users/<user>``, ``clients/<client>`` or ``users/<user>/clients/<client>``.

    Raises:
        EntityConfigError: neither given, or an invalid name.
    """
    if user is None and client is None:
        raise EntityConfigError("an entity is a user, a client id, or both")
    parts = [] if user is None else [USERS, validate_name(user, "user name")]
    return "/".join(parts + ([] if client is None else [CLIENTS, validate_name(client, "client id")]))


def parse_entity(path: str) -> tuple[str | None, str | None]:
    """``(user, client)`` of an entity path, None for the part it does not name.

    Raises:
        EntityConfigError: not one of the three forms, or an invalid name.
    """
    parts = path.split("/")
    if len(parts) == 2 and parts[0] == USERS:
        return validate_name(parts[1], "user name"), None
    if len(parts) == 2 and parts[0] == CLIENTS:
        return None, validate_name(parts[1], "client id")
    if len(parts) == 4 and parts[0] == USERS and parts[2] == CLIENTS:
        return validate_name(parts[1], "user name"), validate_name(parts[3], "client id")
    raise EntityConfigError(f"invalid entity {path!r}: use users/<name>, clients/<client-id> or "
                            f"users/<name>/clients/<client-id> (<default> for the default)")


def altered(current: Mapping[str, str], set: Mapping[str, str], delete: Iterable[str]) -> dict[str, str]:
    """``current`` with ``set`` applied and ``delete`` removed (absent keys are fine).

    Raises:
        EntityConfigError: a key both set and deleted, an empty or unprintable key, or a value
            that is not a string.
    """
    removed = frozenset(delete)
    both = removed & frozenset(set)
    if both:
        raise EntityConfigError(f"keys both set and deleted: {', '.join(sorted(both))}")
    for key, value in set.items():
        if not isinstance(key, str) or not key or not key.isprintable() or not isinstance(value, str):
            raise EntityConfigError(f"a setting is a printable key and a string value, got {key!r}")
    result = {k: v for k, v in current.items() if k not in removed}
    result.update(set)
    return result


def changed_entities(old: Snapshot, new: Snapshot) -> list[str]:
    """The paths whose settings differ between two snapshots, sorted."""
    return sorted(path for path in old.keys() | new.keys() if old.get(path) != new.get(path))


def _names(snapshot: Snapshot, entity_type: str) -> list[str]:
    """Names under ``users``, ``clients`` or ``users/<user>/clients`` (see :meth:`EntityConfigs.entities`)."""
    parts = entity_type.split("/")
    if entity_type == CLIENTS:
        found = {p.split("/")[1] for p in snapshot if p.startswith(CLIENTS + "/")}
    elif entity_type == USERS:
        found = {p.split("/")[1] for p in snapshot if p.startswith(USERS + "/")}
    elif len(parts) == 3 and parts[0] == USERS and parts[2] == CLIENTS:
        prefix = f"{USERS}/{validate_name(parts[1], 'user name')}/{CLIENTS}/"
        found = {p[len(prefix):] for p in snapshot if p.startswith(prefix)}
    else:
        raise EntityConfigError(f"invalid entity type {entity_type!r}: use users, clients or users/<name>/clients")
    return sorted(found)


class EntityConfigs(Protocol):
    """A store of entity settings (see the module docstring). Implementations are thread-safe."""

    def get(self, entity: str) -> dict[str, str]:
        """A copy of the entity's settings, from memory; ``{}`` for an entity without any.

        Raises:
            EntityConfigError: an invalid entity path.
        """
        ...

    def entities(self, entity_type: str) -> list[str]:
        """Sorted names with settings under ``entity_type``: ``users`` (users with settings of
        their own or of one of their ``users/<name>/clients/...``), ``clients``, or
        ``users/<name>/clients``."""
        ...

    def alter(self, entity: str, set: Mapping[str, str] = NO_CHANGES, delete: Iterable[str] = ()) -> None:
        """Set ``set`` and delete ``delete`` (absent keys are fine), keeping the entity's other
        keys, as one atomic change; then tell the subscribers.

        Raises:
            EntityConfigError: an invalid entity, key or value, or a store that could not be written.
        """
        ...

    def subscribe(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(entity_path)`` after each change, this process's or another's."""
        ...

    def close(self) -> None:
        """Stop watching for changes (idempotent). Reads still answer from the last copy."""
        ...


class SnapshotEntityConfigs:
    """What every store shares: an immutable in-memory snapshot, swapped whole, and subscribers.

    ``get`` and ``entities`` read the current snapshot without a lock, so they never wait for
    a write in progress. Subclasses install new snapshots (:meth:`_install`) and notify.
    """

    def __init__(self) -> None:
        self._snapshot: Snapshot = {}
        self._callbacks: list[Callable[[str], None]] = []
        self._callbacks_lock = threading.Lock()

    def get(self, entity: str) -> dict[str, str]:
        parse_entity(entity)
        return dict(self._snapshot.get(entity, {}))

    def entities(self, entity_type: str) -> list[str]:
        return _names(self._snapshot, entity_type)

    def subscribe(self, callback: Callable[[str], None]) -> None:
        with self._callbacks_lock:
            self._callbacks.append(callback)

    def _install(self, snapshot: Snapshot) -> list[str]:
        """Make ``snapshot`` current (entities without keys left out); the paths that changed."""
        new = {path: dict(config) for path, config in snapshot.items() if config}
        changed = changed_entities(self._snapshot, new)
        self._snapshot = new
        return changed

    def _install_entity(self, entity: str, config: Mapping[str, str]) -> list[str]:
        """Replace one entity's settings; ``[entity]`` if that changed them, else ``[]``."""
        new = dict(self._snapshot)
        new[entity] = dict(config)
        return self._install(new)

    def _notify(self, paths: Iterable[str]) -> None:
        """Call every subscriber with each path; a failing subscriber is logged, not raised."""
        with self._callbacks_lock:
            callbacks = list(self._callbacks)
        for path in paths:
            for callback in callbacks:
                try:
                    callback(path)
                except Exception:
                    log.exception("entity_configs.subscriber_failed", entity=path)


class MemoryEntityConfigs(SnapshotEntityConfigs):
    """An :class:`EntityConfigs` in memory only, for tests; subscribers run on the writer's thread."""

    def __init__(self, initial: Snapshot | None = None) -> None:
        super().__init__()
        self._lock = threading.Lock()
        for path in initial or {}:
            parse_entity(path)
        self._install(initial or {})

    def alter(self, entity: str, set: Mapping[str, str] = NO_CHANGES, delete: Iterable[str] = ()) -> None:
        parse_entity(entity)
        with self._lock:
            changed = self._install_entity(entity, altered(self._snapshot.get(entity, {}), set, delete))
        self._notify(changed)

    def close(self) -> None:
        """Nothing to stop: a memory store has no watcher."""
