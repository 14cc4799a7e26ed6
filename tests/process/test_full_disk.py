"""A real ``rill-broker`` on a disk that fills up: refused writes leave nothing behind, and the stop is clean.

The data directory sits on a small tmpfs mounted by the test (CI runs as root); a
ballast file takes most of it, so the disk fills after a few produces and frees up
when the ballast goes.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rill.client.errors import ErrorCode
from rill.client.protocol import requests as rq
from rill.client.protocol.messages import encode_message_set
from rill.client.simple import SimpleConsumer

from tests.conftest import RawClient
from tests.process.broker_process import BrokerProcess

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root (CI runs as root)")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path, leave: int) -> Path:
    """A ballast file taking all but about ``leave`` bytes of the disk."""
    stats = os.statvfs(disk)
    free = stats.f_bavail * stats.f_frsize
    ballast = disk / "ballast"
    with open(ballast, "wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return ballast


def test_a_full_disk_refuses_whole_batches_and_the_stop_is_clean(small_disk: Path) -> None:
    """A batch answered StorageError leaves none of its messages after restart; SIGTERM exits 0 naming the failed partition."""
    data = small_disk / "data"
    broker = BrokerProcess(data).start()
    raw = RawClient("127.0.0.1", broker.port)
    assert rq.decode_create_topic_response(raw.request(rq.encode_create_topic("full", 2))) == (0, 2)
    ballast = _fill(small_disk, 600_000)
    batch = [b"m" * 990] * 100  # ~100 KB per produce: the disk fills in the middle of one
    acked, refused = 0, None
    for i in range(40):
        _, [ack] = rq.decode_produce_ack_response(raw.request(rq.encode_produce_ack(
            [rq.ProduceRequest("full", 0, encode_message_set([b"%04d" % i + p[4:] for p in batch]))])))
        if ack.error:
            refused = ack.error
            break
        acked += 1
    raw.close()
    assert refused == ErrorCode.STORAGE_ERROR and 0 < acked < 40
    assert broker.terminate() == 0
    log = broker.log_path.read_text()
    assert "Traceback" not in log
    closed = [e for e in broker.events() if e.get("event") == "logs.closed_with_failed_partitions"]
    assert closed and closed[0]["partitions"] == ["full-0"]
    ballast.unlink()
    again = BrokerProcess(data).start()
    try:
        [recovered] = [e for e in again.events() if e.get("event") == "recovery.completed"]
        assert recovered["partitions"] == 1  # the failed partition, and only it, is recovered
        with SimpleConsumer("127.0.0.1", again.port) as client:
            offset, values = 0, []
            while offset < client.latest_offset("full", 0):
                messages = client.fetch("full", 0, offset, 1 << 20)
                values += [m.value[:4] for m in messages]
                offset = messages[-1].next_offset
        assert len(values) == acked * 100  # nothing of the refused batch survived: a retry duplicates nothing
        assert values == [b"%04d" % i for i in range(acked) for _ in range(100)]
        with SimpleConsumer("127.0.0.1", again.port) as client:
            assert client.latest_offset("full", 1) == 0
    finally:
        assert again.terminate() == 0


def test_a_start_refusal_names_the_file_and_what_to_do(tmp_path: Path) -> None:
    """A stray directory where a segment should be stops the start with the path and a hint, not a bare errno."""
    data = tmp_path / "data"
    (data / "t-0" / "00000000000000000000.log").mkdir(parents=True)
    broker = BrokerProcess(data)
    with pytest.raises(RuntimeError, match="exited with 1"):
        broker.start(timeout=30)
    [failed] = [e for e in broker.events() if e.get("event") == "broker.start_failed"]
    assert str(data / "t-0" / "00000000000000000000.log") in failed["error"]
    assert "move it out of the data directory" in failed["error"]
    assert "Traceback" not in broker.log_path.read_text()


def test_an_unwritable_data_directory_is_named(tmp_path: Path) -> None:
    """An immutable lock file (EPERM even for root) stops the start naming it and saying what to do."""
    data = tmp_path / "data"
    data.mkdir()
    lock = data / ".lock"
    lock.touch()
    made = subprocess.run(["chattr", "+i", str(lock)], capture_output=True, text=True)
    assert made.returncode == 0, f"chattr +i failed (e2fsprogs, an ext4 tmp dir): {made.stderr}"
    try:
        broker = BrokerProcess(data)
        with pytest.raises(RuntimeError, match="exited with 1"):
            broker.start(timeout=30)
        [failed] = [e for e in broker.events() if e.get("event") == "broker.start_failed"]
        assert str(lock) in failed["error"] and "access" in failed["error"]
    finally:
        subprocess.run(["chattr", "-i", str(lock)], check=False)
