"""Start-up refusals an operator can act on: every I/O error names its file and what to do.

``describe_os_error(exc)`` turns an ``OSError`` into one line: the reason, the file
(or files) it concerns, and a hint for the usual causes (permissions, a stray file
or directory, a full or read-only disk, too few descriptors). The corruption
refusals (``CorruptLogError``) already carry the file, position and remedy.
"""

from __future__ import annotations

import errno

_HINTS: dict[int, str] = {
    errno.EACCES: "give the broker's user read and write access to the data directory and everything in it",
    errno.EPERM: "give the broker's user read and write access to the data directory and everything in it",
    errno.EISDIR: "a directory stands where rill expects a file: move it out of the data directory",
    errno.ENOTDIR: "a file stands where rill expects a directory: move it out of the data directory",
    errno.ENOSPC: "the disk is full: free space, then start again",
    errno.EDQUOT: "the disk quota is used up: free space, then start again",
    errno.EROFS: "the file system is read-only: remount it read-write",
    errno.EMFILE: "raise the open-files limit (ulimit -n), or lower log.open.files.max or max.connections",
    errno.ENFILE: "the system is out of file descriptors: raise fs.file-max or stop other processes",
    errno.EIO: "the disk reported an I/O error: check it (dmesg, smartctl) before starting again",
    errno.ENOENT: "a file disappeared or the path is wrong: check log.dir",
    errno.EADDRINUSE: "another process listens on that port: stop it or choose another port",
}


def describe_os_error(exc: OSError) -> str:
    """One line: what failed, on which file, and what to do."""
    reason = exc.strerror or str(exc)
    where = " -> ".join(str(f) for f in (exc.filename, exc.filename2) if f is not None)
    hint = _HINTS.get(exc.errno or 0)
    text = f"{reason}: {where}" if where else reason
    return f"{text} ({hint})" if hint else text
