"""Entity settings of a cluster, in ZooKeeper exactly as Kafka lays them out (``ZkData.scala``).

Each entity is a persistent node holding ``{"version":1,"config":{...}}``::

    /config/users/<user>                        /config/users/<default>
    /config/clients/<client-id>                 /config/clients/<default>
    /config/users/<user>/clients/<client-id>

with names URL-encoded as Kafka's ``Sanitizer`` does (``alice@example.com`` is
``alice%40example.com``; only ``[A-Za-z0-9._-]`` stay as they are; ``<default>`` is
written as it is), so ``kafka-configs --zookeeper`` and rill read each other's users.
After each change the writer adds a change notification, a persistent sequential node
``/config/changes/config_change_<seq>`` holding ``{"version":2,"entity_path":"users/alice"}``
(the sanitized path). Readers also take Kafka's older ``{"version":1,"entity_type":...,
"entity_name":...}``, and ignore entity types other than users and clients.

A store loads every user and client entity when it starts and keeps them in memory. A
``kazoo`` ChildrenWatch on ``/config/changes`` wakes a worker thread, which re-reads the
entity each new notification names (in sequence order) and tells the subscribers if its
settings changed. After a lost session (when notifications may have been missed) the
worker re-reads everything.

Writes are conditional on the node's version and retried (up to :data:`MAX_ATTEMPTS`
times) when another writer got in first, so two writers never lose each other's updates.
An entity left without keys is deleted, and so are the ``clients`` node and the user node
above it once empty (Kafka keeps them as ``{"config":{}}``; both read the same).

Notifications are never read again once processed. As Kafka's brokers do, notifications
older than 15 minutes (:data:`NOTIFICATION_EXPIRY_S`) are deleted, here by the writer right
after it adds its own: their age is measured against the new node's ``ctime``, so only
ZooKeeper's clock counts. A reader whose session was lost for longer re-reads everything.

The store does not own the kazoo client: the caller starts it before and stops it after
:meth:`ZkEntityConfigs.close`. Thread-safe as :class:`~rill.client.security.entity_configs.SnapshotEntityConfigs`.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, unquote_plus

import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch

from rill.client.security.entity_configs import (CLIENTS, DEFAULT, NO_CHANGES, USERS, EntityConfigError,
                                                 SnapshotEntityConfigs, altered, parse_entity)
from rill.client.zookeeper.wake_loop import run_when_woken

__all__ = ["CHANGES_PATH", "CONFIG_PATH", "NOTIFICATION_EXPIRY_S", "ZkEntityConfigs", "desanitize", "sanitize"]

log = structlog.get_logger(__name__)

CONFIG_PATH = "/config"
CHANGES_PATH = "/config/changes"
CHANGE_PREFIX = "config_change_"
NOTIFICATION_EXPIRY_S = 15 * 60
MAX_ATTEMPTS = 10


def sanitize(name: str) -> str:
    """A user name or client id as a node name, Kafka's ``Sanitizer.sanitize`` (Java's URLEncoder,
    with ``*`` and spaces percent-encoded); ``<default>`` stays as it is."""
    return name if name == DEFAULT else quote(name, safe="").replace("~", "%7E")


def desanitize(node: str) -> str:
    """The name a node name stands for (Kafka's ``Sanitizer.desanitize``).

    Raises:
        UnicodeDecodeError: percent-escapes that are not UTF-8.
    """
    return node if node == DEFAULT else unquote_plus(node, errors="strict")


def _sanitized_path(entity: str) -> str:
    """``users/alice@x`` -> ``users/alice%40x``: the entity path as Kafka writes it in ZooKeeper."""
    user, client = parse_entity(entity)
    parts = [] if user is None else [USERS, sanitize(user)]
    return "/".join(parts + ([] if client is None else [CLIENTS, sanitize(client)]))


def _node(entity: str) -> str:
    return f"{CONFIG_PATH}/{_sanitized_path(entity)}"


def _encode(config: Mapping[str, str]) -> bytes:
    """``{"version":1,"config":{...}}`` as Kafka's Json.encodeAsBytes writes it (keys sorted here)."""
    return json.dumps({"version": 1, "config": dict(sorted(config.items()))}, separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8")


def _decode(node: str, data: bytes | None) -> dict[str, str]:
    """The settings in an entity node (``{}`` for an empty node, as makepath leaves parents).

    Raises:
        EntityConfigError: not ``{"version":1,"config":{...strings...}}``.
    """
    if not data:
        return {}
    try:
        document: Any = json.loads(data)
    except ValueError:
        raise EntityConfigError(f"ZooKeeper node {node}: not JSON") from None
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(config, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in config.items()):
        raise EntityConfigError(f"ZooKeeper node {node}: expected {{\"version\":1,\"config\":{{...}}}}")
    return config


def _notification_entity(data: bytes) -> str | None:
    """The (desanitized) entity a change notification names; None for other entity types.

    Raises:
        EntityConfigError: a notification that does not parse.
    """
    try:
        document: Any = json.loads(data)
        if document["version"] == 1:
            sanitized = f"{document['entity_type']}/{document['entity_name']}"
        else:
            sanitized = document["entity_path"]
        parts = str(sanitized).split("/")
        if parts[0] not in (USERS, CLIENTS):
            return None
        parts[1::2] = [desanitize(p) for p in parts[1::2]]
        entity = "/".join(parts)
        parse_entity(entity)
        return entity
    except (ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError) as exc:
        raise EntityConfigError(f"malformed change notification {data[:100]!r}: {exc}") from None


def _sequence(child: str) -> int | None:
    suffix = child[len(CHANGE_PREFIX):]
    return int(suffix) if child.startswith(CHANGE_PREFIX) and suffix.isdigit() else None


class ZkEntityConfigs(SnapshotEntityConfigs):
    """The entity settings under ``/config`` of the ZooKeeper ``zk`` (a started client; see the module docstring).

    Raises (when opened):
        EntityConfigError: ZooKeeper could not be read.
    """

    def __init__(self, zk: KazooClient) -> None:
        super().__init__()
        self.zk = zk
        self._io_lock = threading.Lock()
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._children: list[str] = []
        self._reload_all = False
        try:
            zk.ensure_path(CHANGES_PATH)
            seen = [s for s in map(_sequence, zk.get_children(CHANGES_PATH)) if s is not None]
            self._last_seen = max(seen, default=-1)  # everything up to here is in the load below
            with self._io_lock:
                self._install(self._load_all())
        except (KazooException, KazooTimeoutError) as exc:
            raise EntityConfigError(f"cannot read the settings in ZooKeeper: {exc!r}") from exc
        self._thread = threading.Thread(target=self._run, name="entity-configs zookeeper", daemon=True)
        self._thread.start()
        zk.add_listener(self._on_state)
        ChildrenWatch(zk, CHANGES_PATH, self._on_children)

    # -- reading ------------------------------------------------------------------------------

    def _read(self, entity: str) -> dict[str, str] | None:
        """The entity's settings in ZooKeeper (``{}`` for none), or None when its node does not parse."""
        node = _node(entity)
        try:
            data, _ = self.zk.get(node)
        except NoNodeError:
            return {}
        try:
            return _decode(node, data)
        except EntityConfigError as exc:
            log.error("entity_configs.bad_node", node=node, error=str(exc))
            return None

    def _children_of(self, path: str) -> list[str]:
        try:
            return sorted(self.zk.get_children(path))
        except NoNodeError:
            return []

    def _load_all(self) -> dict[str, dict[str, str]]:
        """Every user, client and user-client entity in ZooKeeper (nodes that do not parse are logged and left out)."""
        paths: list[str] = []
        for user_node in self._children_of(f"{CONFIG_PATH}/{USERS}"):
            paths.append(f"{USERS}/{user_node}")
            paths += [f"{USERS}/{user_node}/{CLIENTS}/{c}"
                      for c in self._children_of(f"{CONFIG_PATH}/{USERS}/{user_node}/{CLIENTS}")]
        paths += [f"{CLIENTS}/{c}" for c in self._children_of(f"{CONFIG_PATH}/{CLIENTS}")]
        entities: dict[str, dict[str, str]] = {}
        for sanitized in paths:
            parts = sanitized.split("/")
            try:
                parts[1::2] = [desanitize(p) for p in parts[1::2]]
                entity = "/".join(parts)
                parse_entity(entity)
            except (UnicodeDecodeError, EntityConfigError) as exc:
                log.warning("entity_configs.bad_entity_name", node=f"{CONFIG_PATH}/{sanitized}", error=str(exc))
                continue
            config = self._read(entity)
            if config:
                entities[entity] = config
        return entities

    # -- watching -----------------------------------------------------------------------------

    def _on_children(self, children: list[str]) -> bool | None:
        """ChildrenWatch callback (kazoo's thread): hand the list to the worker; False stops the watch."""
        if self._stopping.is_set():
            return False
        self._children = children
        self._wake.set()
        return None

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            self._reload_all = True
        elif state == KazooState.CONNECTED:
            self._wake.set()

    def _run(self) -> None:
        run_when_woken(self._stopping, self._wake, self._catch_up, failed="entity_configs.zookeeper_read_failed")

    def _catch_up(self) -> None:
        """Worker step: re-read everything after a lost session, then each entity a new notification names."""
        if self._reload_all:
            self._reload_all = False
            with self._io_lock:
                changed = self._install(self._load_all())
            self._notify(changed)
        pending = sorted((s, c) for c in self._children if (s := _sequence(c)) is not None and s > self._last_seen)
        for sequence, child in pending:
            try:
                data, _ = self.zk.get(f"{CHANGES_PATH}/{child}")
                entity = _notification_entity(data)
            except NoNodeError:  # purged already
                entity = None
            except EntityConfigError as exc:
                log.warning("entity_configs.bad_notification", node=f"{CHANGES_PATH}/{child}", error=str(exc))
                entity = None
            if entity is not None:
                with self._io_lock:
                    config = self._read(entity)
                    changed = [] if config is None else self._install_entity(entity, config)
                if changed:
                    log.info("entity_configs.changed", entity=entity, notification=child)
                self._notify(changed)
            self._last_seen = sequence

    # -- writing ------------------------------------------------------------------------------

    def alter(self, entity: str, set: Mapping[str, str] = NO_CHANGES, delete: Iterable[str] = ()) -> None:
        node = _node(entity)
        delete = list(delete)
        try:
            with self._io_lock:
                config, written = self._write(entity, node, set, delete)
                if written:
                    self._announce(entity)
                changed = self._install_entity(entity, config)
        except (KazooException, KazooTimeoutError) as exc:
            raise EntityConfigError(f"{entity}: ZooKeeper failed during the change, which may or may not have been "
                                    f"made: {exc!r}") from exc
        self._notify(changed)

    def _write(self, entity: str, node: str, set: Mapping[str, str], delete: list[str]) -> tuple[dict[str, str], bool]:
        """Read, change, write back conditionally on the version; ``(new settings, whether written)``."""
        for attempt in range(MAX_ATTEMPTS):
            try:
                data, stat = self.zk.get(node)
                current, version = _decode(node, data), stat.version
            except NoNodeError:
                current, version = {}, None
            config = altered(current, set, delete)
            if config == current:
                return config, False
            try:
                if version is None:
                    self.zk.create(node, _encode(config), makepath=True)
                elif config:
                    self.zk.set(node, _encode(config), version=version)
                else:
                    self._delete(node, version)
                return config, True
            except (NodeExistsError, NoNodeError, BadVersionError):
                time.sleep(random.uniform(0, 0.01 * (attempt + 1)))  # another writer got in first: again
        raise EntityConfigError(f"{entity}: gave up after {MAX_ATTEMPTS} attempts, other writers kept changing it")

    def _delete(self, node: str, version: int) -> None:
        """Delete an entity left without keys, then its empty ``clients`` and user nodes above."""
        try:
            self.zk.delete(node, version=version)
        except NotEmptyError:  # a user with users/<user>/clients/... under it
            self.zk.set(node, _encode({}), version=version)
            return
        parent = node.rsplit("/", 1)[0]
        if not parent.endswith(f"/{CLIENTS}") or parent.count("/") != 4:
            return
        user_node = parent.rsplit("/", 1)[0]
        try:
            self.zk.delete(parent)
            data, stat = self.zk.get(user_node)
            if not _decode(user_node, data):
                self.zk.delete(user_node, version=stat.version)
        except (NotEmptyError, NoNodeError, BadVersionError, EntityConfigError):
            return  # still in use, or changed meanwhile: leave it

    def _announce(self, entity: str) -> None:
        """Add the change notification, then purge those over 15 minutes older than it."""
        notification = json.dumps({"version": 2, "entity_path": _sanitized_path(entity)}, separators=(",", ":"))
        path, stat = self.zk.create(f"{CHANGES_PATH}/{CHANGE_PREFIX}", notification.encode("utf-8"), sequence=True,
                                    makepath=True, include_data=True)
        newest = _sequence(path.rsplit("/", 1)[1])
        cutoff_ms = stat.ctime - NOTIFICATION_EXPIRY_S * 1000
        for sequence, child in sorted((s, c) for c in self.zk.get_children(CHANGES_PATH)
                                      if (s := _sequence(c)) is not None and newest is not None and s < newest):
            old = self.zk.exists(f"{CHANGES_PATH}/{child}")
            if old is not None and old.ctime >= cutoff_ms:
                break  # this one and every later one are younger
            try:
                self.zk.delete(f"{CHANGES_PATH}/{child}")
            except NoNodeError:
                continue
            log.debug("entity_configs.notification_purged", node=f"{CHANGES_PATH}/{child}", sequence=sequence)

    def close(self) -> None:
        """Stop the worker and the watch (idempotent); the kazoo client stays the caller's to stop."""
        self._stopping.set()
        self._wake.set()
        self.zk.remove_listener(self._on_state)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)

    def __enter__(self) -> ZkEntityConfigs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
