"""A single broker's ACLs in a file: ``<log.dir>/.security/acls.json``.

The file is JSON, one object per ACL (rill.client.security.acls.binding_to_json)::

    {"version": 1, "acls": [{"resourceType": "Topic", "name": "orders", "patternType": "LITERAL",
                             "principal": "User:alice", "permissionType": "Allow",
                             "operation": "Read", "host": "*"}]}

``.security`` is a dot directory, which the log loader skips, made with mode 0700; the
file has mode 0600. No file means no ACLs.

Writers: ``rill acls`` (``--data-dir``) and the broker itself. Each change is a
read-modify-write under an exclusive ``fcntl.flock`` of ``acls.lock`` in the same
directory, reading the file afresh, so two writers at once lose nothing. The new
content goes to a temporary file that is fsynced, renamed over ``acls.json``, and the
directory is fsynced: a crash leaves the old file or the new one, never half of one.

Readers: a store started with ``poll_interval`` runs a daemon thread that looks at the
file's (inode, size, mtime_ns) every ``poll_interval`` seconds and, when it changed,
reads it and calls the subscribers: ``rill acls add`` while the broker runs takes effect
within about a second. A file that cannot be read or parsed leaves the ACLs as they
were (an error is logged): a broken edit never opens the broker up.

Thread-safe; another helper keeps ``entity-configs.json`` in the same directory.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import structlog

from rill.client.security.acl_store import AclStore, AclTable
from rill.client.security.acls import AclBinding, AclBindingFilter, BindingList, binding_from_json, binding_to_json

__all__ = ["ACLS_FILE", "FileAclStore", "SECURITY_DIR"]

log = structlog.get_logger(__name__)

SECURITY_DIR = ".security"
ACLS_FILE = "acls.json"
LOCK_FILE = "acls.lock"
FORMAT_VERSION = 1

_Signature = tuple[int, int, int] | None  # (inode, size, mtime_ns); None: no file


class FileAclStore(AclStore):
    """The ACLs of the broker whose log directory is ``log_dir``.

    Args:
        log_dir: the broker's ``log.dir``; the file is ``log_dir/.security/acls.json``.
        poll_interval: seconds between looks at the file for other processes' changes;
            None: never look (a command that reads or writes once).

    Raises:
        OSError: the directory cannot be made or the file read.
        ValueError: the file is not a valid ACL file (the message names it).
    """

    def __init__(self, log_dir: str | os.PathLike[str], poll_interval: float | None = 1.0) -> None:
        super().__init__()
        self.directory = Path(log_dir) / SECURITY_DIR
        self.path = self.directory / ACLS_FILE
        self._lock = threading.Lock()
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._signature, self._table = self._read()
        self._unreadable: _Signature = None  # the last file that failed to parse: logged once per streak
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None
        if poll_interval is not None:
            self._poller = threading.Thread(target=self._poll, args=(poll_interval,), daemon=True,
                                            name=f"acl-file-poll {self.path}")
            self._poller.start()

    def add(self, bindings: Iterable[AclBinding]) -> BindingList:
        wanted = list(bindings)
        with self._exclusive():
            table = self._read()[1]
            added = table.add(wanted)
            if added:
                self._write(table)
        if added:
            self._changed()
        return added

    def remove(self, acl_filter: AclBindingFilter) -> BindingList:
        with self._exclusive():
            table = self._read()[1]
            removed = table.remove(acl_filter)
            if removed:
                self._write(table)
        if removed:
            self._changed()
        return removed

    def all(self) -> BindingList:
        with self._lock:
            return self._table.bindings()

    def close(self) -> None:
        """Stop the polling thread (waits for it)."""
        self._stop.set()
        if self._poller is not None and self._poller is not threading.current_thread():
            self._poller.join()

    # --- the file -------------------------------------------------------------------

    def _stat(self) -> _Signature:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _read(self) -> tuple[_Signature, AclTable]:
        """The file's signature and ACLs, as of one open (no file: no ACLs).

        Raises:
            OSError, ValueError: as the constructor.
        """
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                data = f.read()
        except FileNotFoundError:
            return None, AclTable()
        try:
            doc = json.loads(data)
            if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION or not isinstance(
                    doc.get("acls"), list):
                raise ValueError(f'expected {{"version": {FORMAT_VERSION}, "acls": [...]}}')
            table = AclTable(binding_from_json(item) for item in doc["acls"])
        except ValueError as exc:  # json.JSONDecodeError is one
            raise ValueError(f"{self.path}: not an ACL file: {exc}") from exc
        return (st.st_ino, st.st_size, st.st_mtime_ns), table

    def _write(self, table: AclTable) -> None:
        """Replace the file with ``table`` atomically and durably, and adopt it (the caller holds the lock
        file, and tells the subscribers once it has let it go)."""
        acls = [binding_to_json(b) for b in table.bindings()]
        doc = {"version": FORMAT_VERSION, "acls": acls}
        fd, tmp = tempfile.mkstemp(prefix=ACLS_FILE + ".", suffix=".tmp", dir=self.directory)  # mode 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=1)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_directory(self.directory)
        with self._lock:
            self._signature, self._table = self._stat(), table
        log.info("acls.file_written", path=str(self.path), acls=len(acls))

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Hold the exclusive lock every writer of this directory takes (blocks until it is free)."""
        fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    # --- polling --------------------------------------------------------------------

    def _poll(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.reload_if_changed()

    def reload_if_changed(self) -> bool:
        """Read the file again if its (inode, size, mtime_ns) changed, and then tell the subscribers.

        What the polling thread calls; a failed read is logged and keeps the ACLs as they were.

        Returns:
            Whether new ACLs were adopted.
        """
        seen = self._stat()
        if seen == self._signature or (seen is not None and seen == self._unreadable):
            return False
        try:
            signature, table = self._read()
        except (OSError, ValueError) as exc:
            if self._unreadable is None:  # once per bad streak: an editor's truncate-then-write is one
                log.error("acls.file_unreadable", path=str(self.path), error=str(exc),
                          keeping="the ACLs read before")
            else:
                log.debug("acls.file_still_unreadable", path=str(self.path), error=str(exc))
            self._unreadable = seen
            return False
        self._unreadable = None
        with self._lock:
            if signature == self._signature:
                return False
            self._signature, self._table = signature, table
        log.info("acls.file_reloaded", path=str(self.path), acls=len(table.bindings()))
        self._changed()
        return True


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
