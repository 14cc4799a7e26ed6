"""The leader-epoch cache (rill.broker.log.leader_epochs): Kafka's file format, assign, endOffsetFor, truncation."""

from __future__ import annotations

import os

import pytest
import structlog

from rill.broker.log import files
from rill.broker.log.leader_epochs import EPOCH_FILE, CorruptEpochFile, EpochEntry, LeaderEpochCache

KAFKA_EXAMPLE = b"0\n3\n0 0\n1 4200\n3 9800\n"


def _cache(tmp_path, epochs: dict[int, int]) -> LeaderEpochCache:
    cache = LeaderEpochCache(str(tmp_path))
    for epoch, start in sorted(epochs.items()):
        cache.assign(epoch, start)
    return cache


def _file(tmp_path) -> bytes:
    return (tmp_path / EPOCH_FILE).read_bytes()


def test_missing_file_means_no_entries(tmp_path):
    """A directory without the file gives an empty cache: latest epoch -1, no latest entry."""
    cache = LeaderEpochCache(str(tmp_path))
    assert (cache.entries(), cache.latest_epoch(), cache.latest_entry()) == ((), -1, None)
    assert not os.path.exists(tmp_path / EPOCH_FILE)


def test_kafka_example_is_written_byte_for_byte(tmp_path):
    """Three assigns write exactly Kafka's example file: version, count, then one 'epoch start' line each."""
    _cache(tmp_path, {0: 0, 1: 4200, 3: 9800})
    assert _file(tmp_path) == KAFKA_EXAMPLE


def test_file_round_trip(tmp_path):
    """A cache opened on a written file holds the same entries, as EpochEntry tuples."""
    (tmp_path / EPOCH_FILE).write_bytes(KAFKA_EXAMPLE)
    cache = LeaderEpochCache(str(tmp_path))
    assert cache.entries() == (EpochEntry(0, 0), EpochEntry(1, 4200), EpochEntry(3, 9800))
    assert cache.latest_entry() == EpochEntry(3, 9800) and cache.latest_epoch() == 3


def test_file_without_final_newline_still_loads(tmp_path):
    """The newline after the last line may be missing (Kafka's reader accepts it too)."""
    (tmp_path / EPOCH_FILE).write_bytes(KAFKA_EXAMPLE[:-1])
    assert LeaderEpochCache(str(tmp_path)).latest_entry() == EpochEntry(3, 9800)


def test_writes_are_durable_replacements(tmp_path, monkeypatch):
    """Every change goes through files.write_file_durably (temporary file, fsync, rename, fsync of the directory)."""
    written = []
    real = files.write_file_durably
    monkeypatch.setattr(files, "write_file_durably", lambda path, data: (written.append((path, data)),
                                                                        real(path, data)))
    _cache(tmp_path, {0: 0, 1: 4200})
    assert written == [(str(tmp_path / EPOCH_FILE), b"0\n1\n0 0\n"), (str(tmp_path / EPOCH_FILE), b"0\n2\n0 0\n1 4200\n")]


@pytest.mark.parametrize("data, line", [
    (b"", 1),                              # empty file
    (b"1\n0\n", 1),                        # version other than 0
    (b"0\n", 2),                           # no count
    (b"0\nthree\n", 2),                    # count not a number
    (b"0\n-1\n", 2),                       # negative count
    (b"0\n2\n0 0\n", 2),                   # count larger than the entries
    (b"0\n1\n0 0\n1 5\n", 2),              # count smaller than the entries
    (b"0\n1\n0 x\n", 3),                   # non-numeric offset
    (b"0\n1\n0\n", 3),                     # one field
    (b"0\n1\n0 0 0\n", 3),                 # three fields
    (b"0\n1\n0\t0\n", 3),                  # not one space
    (b"0\n1\n-1 0\n", 3),                  # negative epoch
    (b"0\n1\n0 -5\n", 3),                  # negative offset
    (b"0\n1\n0 " + b"9" * 30 + b"\n", 3),  # a number no offset can be
    (b"0\n2\n1 0\n1 5\n", 4),              # epochs not strictly ascending
    (b"0\n2\n0 5\n1 5\n", 4),              # offsets not strictly ascending
    (b"0\n2\n0 0\n\n", 4),                 # blank line
    (b"0\n1\n0 \xff\n", 3),                # not ASCII
])
def test_corrupt_file_is_refused_with_path_and_line(tmp_path, data, line):
    """Anything but the exact format raises CorruptEpochFile (a ValueError) naming the file and the line."""
    (tmp_path / EPOCH_FILE).write_bytes(data)
    with pytest.raises(CorruptEpochFile) as raised:
        LeaderEpochCache(str(tmp_path))
    assert isinstance(raised.value, ValueError)
    assert (raised.value.path, raised.value.line) == (str(tmp_path / EPOCH_FILE), line)
    assert f"line {line}" in str(raised.value)


def test_assign_of_the_latest_epoch_again_changes_nothing(tmp_path):
    """Assigning the latest epoch again, at any offset, is a no-op (nothing is rewritten)."""
    cache = _cache(tmp_path, {0: 0, 1: 100})
    before = _file(tmp_path)
    cache.assign(1, 300)
    cache.assign(1, 50)
    assert cache.entries() == (EpochEntry(0, 0), EpochEntry(1, 100)) and _file(tmp_path) == before


def test_assign_removes_conflicting_entries_and_warns(tmp_path):
    """A new entry not after the latest in epoch and offset first removes the entries it conflicts with, logged."""
    cache = _cache(tmp_path, {0: 0, 2: 100, 4: 300})
    with structlog.testing.capture_logs() as events:
        cache.assign(3, 200)
    assert cache.entries() == (EpochEntry(0, 0), EpochEntry(2, 100), EpochEntry(3, 200))
    [warning] = [e for e in events if e["event"] == "leader_epochs.conflicting_entries_removed"]
    assert warning["log_level"] == "warning" and warning["removed"] == [(4, 300)]
    cache.assign(5, 150)  # a later epoch at a lower offset: every entry starting at or after 150 goes
    assert cache.entries() == (EpochEntry(0, 0), EpochEntry(2, 100), EpochEntry(5, 150))
    assert LeaderEpochCache(str(tmp_path)).entries() == cache.entries()


def test_assign_replacing_an_epoch_without_data_is_not_a_warning(tmp_path):
    """A new epoch starting where the latest one started (no data written in it) replaces it quietly."""
    cache = _cache(tmp_path, {0: 0, 1: 100})
    with structlog.testing.capture_logs() as events:
        cache.assign(2, 100)
    assert cache.entries() == (EpochEntry(0, 0), EpochEntry(2, 100))
    assert not [e for e in events if e["log_level"] == "warning"]


def test_assign_refuses_negative_values(tmp_path):
    """A negative epoch or start offset raises ValueError and writes nothing."""
    cache = LeaderEpochCache(str(tmp_path))
    for epoch, start in ((-1, 0), (0, -1)):
        with pytest.raises(ValueError):
            cache.assign(epoch, start)
    assert cache.entries() == () and not os.path.exists(tmp_path / EPOCH_FILE)


def test_end_offset_for_follows_kip_279(tmp_path):
    """Leader {0:0, 2:1, 4:4} (replication.md 2.4): asked about 3 it answers (2, 4), about 1 it answers (0, 1)."""
    leader = _cache(tmp_path, {0: 0, 2: 1, 4: 4})
    assert leader.end_offset_for(3, 6) == (2, 4)
    assert leader.end_offset_for(1, 6) == (0, 1)


def test_end_offset_for_the_latest_epoch_is_the_log_end(tmp_path):
    """Asked about its latest epoch, a cache answers that epoch and the given log end offset."""
    assert _cache(tmp_path, {0: 0, 2: 1, 4: 4}).end_offset_for(4, 6) == (4, 6)


def test_end_offset_for_undefined_and_unknown_newer_epochs(tmp_path):
    """Epoch -1, or an epoch newer than every known one, answers (-1, -1); so does any epoch on an empty cache."""
    (tmp_path / "empty").mkdir()
    cache = _cache(tmp_path, {0: 0, 2: 1, 4: 4})
    assert cache.end_offset_for(-1, 6) == (-1, -1)
    assert cache.end_offset_for(5, 6) == (-1, -1)
    assert LeaderEpochCache(str(tmp_path / "empty")).end_offset_for(0, 6) == (-1, -1)


def test_end_offset_for_an_epoch_older_than_every_entry(tmp_path):
    """Asked about an epoch below the first known one, a cache answers that epoch and the first entry's start."""
    assert _cache(tmp_path, {2: 100, 4: 400}).end_offset_for(1, 500) == (1, 100)


def test_end_offset_for_on_trace_b(tmp_path):
    """Trace B (replication.md 2.2): B's cache {0:0, 1:100}; asked about epoch 0 it answers (0, 100)."""
    assert _cache(tmp_path, {0: 0, 1: 100}).end_offset_for(0, 250) == (0, 100)


def test_truncate_from_end_drops_entries_at_or_after_the_end(tmp_path):
    """After the log is cut to end at E, entries starting at or after E are gone, in memory and on disk."""
    cache = _cache(tmp_path, {0: 0, 1: 100, 2: 250})
    cache.truncate_from_end(250)
    assert cache.entries() == (EpochEntry(0, 0), EpochEntry(1, 100))
    assert LeaderEpochCache(str(tmp_path)).entries() == cache.entries()


def test_truncate_from_end_writes_only_on_change(tmp_path, monkeypatch):
    """A truncation from the end that removes nothing (or a negative end) does not rewrite the file."""
    cache = _cache(tmp_path, {0: 0, 1: 100})
    monkeypatch.setattr(files, "write_file_durably", lambda path, data: pytest.fail("rewritten"))
    cache.truncate_from_end(101)
    cache.truncate_from_end(-1)
    assert cache.entries() == (EpochEntry(0, 0), EpochEntry(1, 100))


def test_truncate_from_start_moves_the_covering_entry_up(tmp_path):
    """When the log start moves to S, entries before S go and the last of them now starts at S (Kafka's rule)."""
    cache = _cache(tmp_path, {0: 0, 1: 100, 2: 250})
    cache.truncate_from_start(150)
    assert cache.entries() == (EpochEntry(1, 150), EpochEntry(2, 250))
    assert LeaderEpochCache(str(tmp_path)).entries() == cache.entries()


def test_truncate_from_start_writes_only_on_change(tmp_path, monkeypatch):
    """A start at or before the first entry's start changes nothing and rewrites nothing."""
    cache = _cache(tmp_path, {1: 100, 2: 250})
    monkeypatch.setattr(files, "write_file_durably", lambda path, data: pytest.fail("rewritten"))
    cache.truncate_from_start(50)
    cache.truncate_from_start(100)
    assert cache.entries() == (EpochEntry(1, 100), EpochEntry(2, 250))


def test_clear_leaves_an_empty_file(tmp_path):
    """clear() removes every entry and leaves the file present with count 0 (it marks a replica)."""
    cache = _cache(tmp_path, {0: 0, 1: 100})
    cache.clear()
    assert cache.entries() == () and _file(tmp_path) == b"0\n0\n"
