"""Bytes that rot on disk: reads never serve them, the scrubber and --verify-logs find them, repairs keep them aside."""

from __future__ import annotations

import glob
import os
import threading
import time

import pytest
import structlog

from rill.broker.log import LogConfig, LogManager, repair
from rill.broker.log.integrity import CorruptDataError, SegmentIntegrity
from rill.broker.log.scrubber import Scrubber
from rill.broker.log.verify import verify_data_dir
from rill.client.errors import ErrorCode
from rill.client.protocol.messages import decode_message_set, encode_message_set, scan

CONFIG = LogConfig(segment_bytes=4096)


def _flip(path: str, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0xFF]))


def _written(tmp_path, count: int = 100) -> tuple[list[int], list[bytes]]:
    """A cleanly closed one-partition topic t of ``count`` 100-byte messages; their offsets and values."""
    manager = LogManager(str(tmp_path), CONFIG)
    manager.create_topic("t", 1)
    values = [bytes([65 + i % 26]) * 100 for i in range(count)]
    offsets = [manager.get("t", 0).append(encode_message_set([v])).first_offset for v in values]
    manager.close()
    return offsets, values


def _read_all(log, offset: int | None = None) -> list[tuple[int, bytes]]:
    """Every message a reader gets from ``offset`` (the log start) on, skipping nothing (stops at an error)."""
    out, offset = [], log.start_offset if offset is None else offset
    while offset < log.end_offset:
        piece = log.read(offset, 100_000)
        messages, _ = decode_message_set(os.pread(piece.file.fileno(), piece.length, piece.position),
                                         base_offset=offset)
        out += [(m.offset, m.value) for m in messages]
        offset = piece.next_offset
    return out


def test_a_flipped_byte_is_never_served_and_its_offset_is_refused(tmp_path):
    """After a clean shutdown, a read stops before the rotten message and a read of it fails with code 2 naming it."""
    offsets, values = _written(tmp_path)
    path = os.path.join(tmp_path, "t-0", "00000000000000000000.log")
    _flip(path, offsets[10] + 20)
    manager = LogManager(str(tmp_path), CONFIG)
    log = manager.get("t", 0)
    found: list[object] = []
    manager.on_corruption.append(lambda lg, corrupt: found.append(corrupt))
    piece = log.read(0, 100_000)
    assert piece.next_offset == offsets[10]
    for _ in range(2):  # found by the read, then known
        with pytest.raises(CorruptDataError) as caught:
            log.read(offsets[10], 1000)
        assert caught.value.code == ErrorCode.INVALID_MESSAGE and str(offsets[10]) in str(caught.value)
        assert path in str(caught.value) and "CRC mismatch" in str(caught.value)
        assert caught.value.resume_offset == offsets[11]
    assert [c.start for c in found] == [offsets[10]]
    assert _read_all(log, offsets[11]) == list(zip(offsets[11:], values[11:]))
    manager.close()


def test_reads_check_at_most_a_budget_of_unverified_bytes(tmp_path, monkeypatch):
    """A read of a large unverified range is cut at the budget (whole messages), so one fetch never checks gigabytes."""
    from rill.broker.log import reads as log_module

    monkeypatch.setattr(log_module, "VERIFY_BUDGET", 1000)
    manager = LogManager(str(tmp_path), LogConfig())
    manager.create_topic("t", 1)
    manager.get("t", 0).append(encode_message_set([b"m" * 10_000] * 100))  # 1,001,000 bytes
    manager.close()
    manager = LogManager(str(tmp_path), LogConfig())
    log = manager.get("t", 0)
    first = log.read(0, 2_000_000)
    assert 1000 <= first.length <= 300_000 and first.length % 10_010 == 0  # the budget, rounded up to one read window
    second = log.read(0, 2_000_000)
    assert second.length > first.length  # the checked part is known now: the next read goes further
    manager.close()


def test_appended_bytes_need_no_second_check(tmp_path, monkeypatch):
    """What this broker appended (checked on the way in) is served without reading it again."""
    from rill.broker.log import reads as log_module

    calls: list[int] = []
    monkeypatch.setattr(log_module, "verify_messages", lambda *a: calls.append(1) or (0, ""))
    manager = LogManager(str(tmp_path), CONFIG)
    manager.create_topic("t", 1)
    log = manager.get("t", 0)
    log.append(encode_message_set([b"x" * 100] * 30))
    assert log.read(0, 100_000).length > 0 and calls == []
    manager.close()


def test_the_scrubber_finds_rot_in_closed_segments_at_its_rate(tmp_path):
    """One scrub pass reads every segment at no more than its rate, records the corrupt range and logs file and position."""
    offsets, _ = _written(tmp_path)
    path = os.path.join(tmp_path, "t-0", "00000000000000000000.log")
    _flip(path, offsets[5] + 12)
    manager = LogManager(str(tmp_path), CONFIG)
    scrubber = Scrubber(manager.logs, bytes_per_second=40_000, interval_s=3600)
    start = time.monotonic()
    with structlog.testing.capture_logs() as events:
        scrubber.scrub_pass()
    elapsed = time.monotonic() - start
    size = manager.get("t", 0).end_offset
    assert scrubber.bytes_checked + 110 >= size and scrubber.corrupt_found == 1
    assert elapsed >= 0.8 * size / 40_000
    [event] = [e for e in events if e["event"] == "log.corrupt_data"]
    assert (event["file"], event["position"], event["bytes"]) == (path, offsets[5], 110)
    with pytest.raises(CorruptDataError):
        manager.get("t", 0).read(offsets[5], 1000)
    assert any(e["event"] == "scrub.pass_completed" and e["corrupt_ranges"] == 1 for e in events)
    manager.close()


def test_the_scrubber_thread_stops_promptly(tmp_path):
    """A slow scrub in progress ends when the manager closes."""
    _written(tmp_path, 300)
    manager = LogManager(str(tmp_path), CONFIG, scrub_bytes_per_second=100, scrub_interval_s=3600)
    manager.start()
    assert manager.scrubber is not None
    threading.Event().wait(0.2)
    start = time.monotonic()
    manager.close()
    assert time.monotonic() - start < 5 and not manager.scrubber.is_alive()


@pytest.mark.parametrize("length", [9, 20, 30, 31, 32, 110, 5000, 65_536, 65_560, 200_000])
def test_filler_is_valid_exactly_sized_and_decodes_to_nothing(length):
    """Quarantine filler is whole valid messages of exactly the range's length; from 31 bytes on it yields no message."""
    data = repair.filler(length)
    assert len(data) == length
    result = scan(data)
    assert result.error == 0 and result.valid_bytes == length
    messages, consumed = decode_message_set(data)
    assert consumed == length
    assert messages == [] if length >= 31 else [m.value for m in messages] == [bytes(length - 9)]


def test_filler_refuses_ranges_too_short_for_a_message():
    """A range under 9 bytes cannot be quarantined."""
    with pytest.raises(repair.RepairError, match="cut"):
        repair.filler(8)


def test_verify_reports_every_corrupt_range_then_quarantine_keeps_every_offset(tmp_path):
    """--verify-logs finds both rotten messages; quarantine replaces them, keeps the bytes aside, and every other offset reads as before."""
    offsets, values = _written(tmp_path)
    path = os.path.join(tmp_path, "t-0", "00000000000000000000.log")
    _flip(path, offsets[3] + 30)
    _flip(path, offsets[20] + 4)
    report = verify_data_dir(str(tmp_path), CONFIG)
    assert [(f.corrupt.path, f.corrupt.start, f.corrupt.length, f.valid_after) for f in report.findings] == [
        (path, offsets[3], 110, True), (path, offsets[20], 110, True)]
    original = open(path, "rb").read()
    for finding in report.findings:
        repair.quarantine(finding, CONFIG)
    assert verify_data_dir(str(tmp_path), CONFIG).findings == []
    sides = sorted(glob.glob(path + ".corrupt-*"))
    assert sorted(open(s, "rb").read() for s in sides) == sorted(
        [original[offsets[3]:offsets[4]], original[offsets[20]:offsets[21]]])
    manager = LogManager(str(tmp_path), CONFIG)
    expected = [(o, v) for i, (o, v) in enumerate(zip(offsets, values)) if i not in (3, 20)]
    assert _read_all(manager.get("t", 0)) == expected
    manager.close()


def test_cut_ends_the_partition_at_the_first_corrupt_byte(tmp_path):
    """--repair cut truncates there, moves every later byte to side files, and lowers the recovery point."""
    offsets, values = _written(tmp_path)
    path = os.path.join(tmp_path, "t-0", "00000000000000000000.log")
    _flip(path, offsets[10] + 30)
    [finding] = verify_data_dir(str(tmp_path), CONFIG).findings
    repair.cut(finding, CONFIG)
    manager = LogManager(str(tmp_path), CONFIG)
    log = manager.get("t", 0)
    assert log.end_offset == offsets[10] and _read_all(log) == list(zip(offsets[:10], values[:10]))
    assert len(glob.glob(os.path.join(tmp_path, "t-0", "*.corrupt-*"))) >= 2  # the segment's tail and later segments
    manager.close()


def test_appends_extend_one_range_that_reads_see_with_the_others():
    """Appends extend the tail range in place; a read spanning it and an older verified range is covered."""
    integrity = SegmentIntegrity()
    integrity.add_verified(0, 100)
    for start in range(100, 1000, 100):
        integrity.extend_tail(start, start + 100)
    assert (integrity.tail_start, integrity.tail_end) == (100, 1000) and integrity.verified == ((0, 100),)
    assert integrity.covers(50, 950) and integrity.verified_end(50) == 1000
    integrity.extend_tail(2000, 2100)  # not contiguous (after a roll or a cut): the old tail is folded in
    assert integrity.verified == ((0, 1000),) and integrity.covers(2000, 2100) and not integrity.covers(900, 2050)


def test_integrity_ranges_merge_and_forget():
    """Verified ranges merge when they touch; a cut forgets everything beyond it."""
    integrity = SegmentIntegrity()
    integrity.add_verified(0, 100)
    integrity.add_verified(100, 150)
    integrity.add_verified(300, 400)
    integrity.add_verified(150, 300)
    assert integrity.verified == ((0, 400),) and integrity.covers(10, 390)
    integrity.add_corrupt(200, 250, "CRC mismatch")
    assert not integrity.covers(10, 390) and integrity.covers(10, 200) and integrity.verified_end(10) == 400
    integrity.forget_after(220)
    assert integrity.verified == ((0, 220),) and integrity.corrupt == ((200, 220),)
