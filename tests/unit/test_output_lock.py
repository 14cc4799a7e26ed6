"""The loader's output lock (rill.client.spark.output_lock): exclusive, naming its holder, released on close."""

from __future__ import annotations

import errno
import json
import os
import socket
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from rill.client.spark import output_lock
from rill.client.spark.output_lock import LOCK_FILE, OutputLock, OutputLocked


def test_second_lock_is_refused_naming_the_holder(tmp_path: Path) -> None:
    """While one lock is held another acquire fails at once, naming the directory, pid, host and start time."""
    out = tmp_path / "out"
    with OutputLock.acquire(out) as held:
        details = json.loads((out / LOCK_FILE).read_text())
        assert (details["pid"], details["host"]) == (os.getpid(), socket.gethostname())
        with pytest.raises(OutputLocked) as refused:
            OutputLock.acquire(out)
        assert held.held
    assert str(refused.value) == (f"another loader is writing {out}: pid {os.getpid()} on host "
                                  f"{socket.gethostname()} since {details['started']} holds {out / LOCK_FILE} "
                                  f"(one loader per output; wait for it to finish)")


def test_released_lock_can_be_taken_again(tmp_path: Path) -> None:
    """Releasing (or leaving the with block) lets the next acquire succeed; the file stays."""
    OutputLock.acquire(tmp_path).release()
    with OutputLock.acquire(tmp_path) as lock:
        assert lock.held
    assert not lock.held and (tmp_path / LOCK_FILE).exists()


def test_unsupported_flock_warns_and_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file system refusing flock (ENOLCK: NFS without locks) gives a warning and a lock holding nothing."""
    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(output_lock.fcntl, "flock", no_locks)
    with capture_logs() as logs:
        lock = OutputLock.acquire(tmp_path)
    assert not lock.held
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == ["spark.load_lock_unsupported"]
