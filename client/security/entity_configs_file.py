"""Entity settings of a single broker: one JSON file in its log.dir.

The file is ``<log.dir>/.security/entity-configs.json`` (the broker's log loader skips names
starting with ``.``), mode 0600 in a 0700 directory, and holds::

    {"version": 1, "entities": {"users/alice": {"SCRAM-SHA-256": "salt=...,iterations=8192"}, ...}}

Writes replace it whole: write a temporary file in the same directory, fsync it, rename it
over the old one, fsync the directory; so a reader sees the old file or the new one, never
half of one, and a crash keeps one of them. Each read-modify-write holds an exclusive
``fcntl.flock`` on ``entity-configs.lock`` beside it, so two processes writing at once (a
broker and ``rill users``, or two ``rill users``) never lose an update.

Another process's change is seen by a daemon thread that stats the file every
``poll_interval`` seconds and re-reads it when its (inode, size, mtime_ns) changed, then
tells the subscribers which entities changed. A file that does not parse is an
:class:`~rill.client.security.entity_configs.EntityConfigError` when the store is opened or
written; the watcher logs it and keeps the last good copy, so a broker keeps running on the
settings it had.

Thread-safe: reads are served from memory without a lock; writes and reloads of one
instance are serialised by a lock, and the file lock serialises writers across processes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import structlog

from rill.client.security.entity_configs import (NO_CHANGES, EntityConfigError, SnapshotEntityConfigs, altered,
                                                 parse_entity)

__all__ = ["CONFIG_FILE", "DIRECTORY", "FileEntityConfigs"]

log = structlog.get_logger(__name__)

DIRECTORY = ".security"
CONFIG_FILE = "entity-configs.json"
LOCK_FILE = "entity-configs.lock"
FORMAT_VERSION = 1


class FileIdentity(NamedTuple):
    """What the watcher compares to tell that the file was replaced or changed."""

    inode: int
    size: int
    mtime_ns: int


def _identity(stat: os.stat_result) -> FileIdentity:
    return FileIdentity(stat.st_ino, stat.st_size, stat.st_mtime_ns)


def parse_file(path: Path, data: bytes) -> dict[str, dict[str, str]]:
    """The entities of a file's contents.

    Raises:
        EntityConfigError: not JSON of the documented shape (the message names the file).
    """
    try:
        document: Any = json.loads(data)
    except ValueError as exc:
        raise EntityConfigError(f"{path}: not valid JSON ({exc}); fix or remove the file") from None
    if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION \
            or not isinstance(document.get("entities"), dict):
        raise EntityConfigError(f"{path}: expected {{\"version\": {FORMAT_VERSION}, \"entities\": {{...}}}}")
    entities: dict[str, dict[str, str]] = {}
    for entity, config in document["entities"].items():
        try:
            parse_entity(entity)
        except EntityConfigError as exc:
            raise EntityConfigError(f"{path}: {exc}") from None
        if not isinstance(config, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in config.items()):
            raise EntityConfigError(f"{path}: the settings of {entity!r} are not an object of strings")
        entities[entity] = config
    return entities


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileEntityConfigs(SnapshotEntityConfigs):
    """The entity settings of the broker whose log.dir is ``data_dir`` (see the module docstring).

    Raises (when opened):
        EntityConfigError: the file exists but cannot be read or parsed.
    """

    def __init__(self, data_dir: str | os.PathLike[str], poll_interval: float = 1.0) -> None:
        super().__init__()
        self.directory = Path(data_dir) / DIRECTORY
        self.path = self.directory / CONFIG_FILE
        self.poll_interval = poll_interval
        self._io_lock = threading.Lock()
        self._seen: FileIdentity | None = None
        self._bad: FileIdentity | None = None  # the last file the watcher could not parse (logged once per streak)
        with self._io_lock:
            self._reload()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"entity-configs {self.path}", daemon=True)
        self._thread.start()

    # -- reading ------------------------------------------------------------------------------

    def _read(self) -> tuple[FileIdentity | None, dict[str, dict[str, str]]]:
        """The file's identity and entities (``(None, {})`` when there is no file)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None, {}
        except OSError as exc:
            raise EntityConfigError(f"{self.path}: cannot read: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as file:
            identity = _identity(os.fstat(file.fileno()))  # of the file read, whatever replaces it since
            data = file.read()
        return identity, parse_file(self.path, data)

    def _reload(self) -> list[str]:
        """Read the file into memory (caller holds ``_io_lock``); the entities that changed."""
        identity, entities = self._read()
        self._seen = identity
        return self._install(entities)

    def _stat(self) -> FileIdentity | None:
        try:
            return _identity(os.stat(self.path))
        except FileNotFoundError:
            return None

    def _watch(self) -> None:
        while not self._stopping.wait(self.poll_interval):
            try:
                self.poll()
            except Exception:
                log.exception("entity_configs.poll_failed", path=str(self.path))

    def poll(self) -> None:
        """Re-read the file if it changed since last seen and tell the subscribers (the watcher
        thread calls this every ``poll_interval``; a test may call it directly)."""
        if self._stat() == self._seen:
            return
        with self._io_lock:
            current = self._stat()
            if current == self._seen or (current is not None and current == self._bad):
                return
            try:
                changed = self._reload()
            except EntityConfigError as exc:
                if self._bad is None:  # once per bad streak: an editor's truncate-then-write is one
                    log.error("entity_configs.unreadable", path=str(self.path), error=str(exc))
                else:
                    log.debug("entity_configs.still_unreadable", path=str(self.path), error=str(exc))
                self._bad = current
                return
            self._bad = None
        if changed:
            log.info("entity_configs.reloaded", path=str(self.path), entities=changed)
        self._notify(changed)

    # -- writing ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        """The exclusive lock every writer of this file holds, across processes."""
        try:
            if not self.directory.is_dir():
                self.directory.mkdir(mode=0o700, exist_ok=True)
                _fsync_directory(self.directory.parent)  # the new directory survives a crash
            fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise EntityConfigError(f"{self.directory}: cannot open the lock file: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _write(self, entities: Mapping[str, Mapping[str, str]]) -> None:
        """Replace the file by one holding ``entities``: temporary file, fsync, rename, fsync the directory."""
        document = {"version": FORMAT_VERSION, "entities": {k: dict(sorted(v.items())) for k, v in
                                                             sorted(entities.items()) if v}}
        data = (json.dumps(document, indent=1, ensure_ascii=False) + "\n").encode("utf-8")
        fd, temporary = tempfile.mkstemp(prefix=CONFIG_FILE + ".", suffix=".tmp", dir=self.directory)  # mode 0600
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        _fsync_directory(self.directory)

    def alter(self, entity: str, set: Mapping[str, str] = NO_CHANGES, delete: Iterable[str] = ()) -> None:
        parse_entity(entity)
        delete = list(delete)
        with self._io_lock, self._file_lock():
            _, entities = self._read()  # the file's latest, under the lock: no update lost
            config = altered(entities.get(entity, {}), set, delete)
            if config != entities.get(entity, {}):
                entities[entity] = config
                try:
                    self._write(entities)
                except OSError as exc:
                    raise EntityConfigError(f"{self.path}: cannot write: {exc.strerror}") from None
            changed = self._reload()  # also picks up what another process wrote since the last poll
            self._bad = None
        self._notify(changed)

    def close(self) -> None:
        """Stop the watcher thread (idempotent). Reads still answer from the last copy."""
        self._stopping.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=max(1.0, 2 * self.poll_interval))

    def __enter__(self) -> FileEntityConfigs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
