"""One loader per output directory: an exclusive ``flock`` on ``OUT/_lock`` for a whole run.

The loader takes the lock before it reads the newest run's offsets and keeps it until
its commit is done, so two loaders never plan from the same offsets. The kernel
releases a ``flock`` when its holder's file descriptor closes, so a loader killed with
SIGKILL never leaves a stale lock: the next one proceeds at once. The file descriptor is
not inherited by child processes (Python's default), so Spark's JVM and its workers do
not keep the lock alive after the driver dies.

``_lock`` (Spark skips names starting with ``_``) holds one JSON line about its last
holder: ``{"pid": 1234, "host": "etl-3", "started": "2026-11-20T10:00:00Z"}``, written
when the lock is taken and read by a loader that is refused, to name the holder. The
file is never deleted: unlinking a lock file lets two processes lock two different
files of the same name.

Where ``flock`` means nothing across machines (a bucket mounted through FUSE, NFS
mounted with ``nolock``) the rule is one loader per output; the commit's re-check of the
newest run (rill.client.spark.output, :class:`OutputMoved`) is the safety net. A file
system that refuses ``flock`` outright (ENOLCK, EOPNOTSUPP) gets a
``spark.load_lock_unsupported`` warning and the run goes on without the lock.

Exceptions::

    RuntimeError
     └── OutputConflict           another loader is writing (or wrote) the same output
          ├── OutputLocked         the lock is held: raised at once, nothing is written
          └── OutputMoved          (rill.client.spark.output) a run was committed meanwhile
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from pathlib import Path
from types import TracebackType

import structlog

__all__ = ["LOCK_FILE", "OutputConflict", "OutputLock", "OutputLocked"]

log = structlog.get_logger(__name__)

LOCK_FILE = "_lock"
_UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP}


class OutputConflict(RuntimeError):
    """Another loader is writing, or wrote while this run was going, the same output directory."""


class OutputLocked(OutputConflict):
    """Another process holds the output's lock; the message names the directory and the holder."""


def _holder(path: Path) -> str:
    """The lock file's holder as ``pid 1234 on host h since T``; less when it is unreadable."""
    try:
        data = json.loads(path.read_text() or "{}")
        return f"pid {int(data['pid'])} on host {data['host']} since {data['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that has not written its details yet"


class OutputLock:
    """The held lock of an output directory (a context manager; :meth:`release` also ends it).

    Not thread-safe; one instance per run. Two instances in one process exclude each
    other too (each opens the file anew, and ``flock`` locks the open file).
    """

    def __init__(self, root: Path, fd: int | None) -> None:
        self.root = root
        self._fd = fd

    @classmethod
    def acquire(cls, root: str | Path) -> OutputLock:
        """Take the lock of ``root`` (created if missing), without waiting.

        Returns:
            The held lock (holding nothing when the file system does not support ``flock``).

        Raises:
            OutputLocked: another process holds it.
            OSError: ``root`` or its lock file cannot be created or opened.
        """
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        path = root / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # not O_TRUNC: the holder's details stay readable
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in _UNSUPPORTED:
                log.warning("spark.load_lock_unsupported", out=str(root), error=str(exc))
                return cls(root, None)
            if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
                raise OutputLocked(f"another loader is writing {root}: {_holder(path)} holds {path} (one loader "
                                   f"per output; wait for it to finish)") from None
            raise
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        details = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": started}) + "\n"
        os.ftruncate(fd, 0)
        os.pwrite(fd, details.encode(), 0)
        log.debug("spark.load_lock_taken", out=str(root))
        return cls(root, fd)

    @property
    def held(self) -> bool:
        """Whether this object holds a lock (False once released, or where ``flock`` is unsupported)."""
        return self._fd is not None

    def release(self) -> None:
        """Let the next loader in (closing the file releases the ``flock``); idempotent."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> OutputLock:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()
