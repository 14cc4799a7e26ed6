"""Replay at start-up: reading across segments, large messages, bad records."""

from __future__ import annotations

import structlog

from rill.broker.log import LogConfig
from rill.client.protocol.messages import CODEC_GZIP, MAGIC_V1, encode_message, encode_message_set
from rill.coordinator.offsets_log import OffsetStore
from rill.coordinator.records import OffsetsCommitted

from .conftest import commit, reopen


def test_empty_log_replays_nothing(store):
    """Replaying an empty log yields no record."""
    assert list(store.replay()) == []


def test_replay_reads_across_segments(open_log):
    """Records spread over many small segments are all replayed, in order."""
    log = open_log(config=LogConfig(segment_bytes=1024, flush_interval_messages=2**62))
    store = OffsetStore(log, max_batch_bytes=300)
    written = [commit(f"group-{n}", n, n * 10) for n in range(300)]
    for record in written:
        store.append([record], None)
    assert len(log.segments) > 10
    assert list(OffsetStore(log, max_batch_bytes=300).replay()) == written


def test_replay_reads_a_record_larger_than_a_read(store, open_log):
    """A record larger than max_batch_bytes is read whole and replayed."""
    big = OffsetsCommitted("g", tuple(("topic", p, p * 1000) for p in range(200)))
    store.append([commit("g", 0, 1)], None)
    store.append([big], None)
    store.append([commit("g", 0, 2)], None)
    assert reopen(open_log, store, max_batch_bytes=64) == [commit("g", 0, 1), big, commit("g", 0, 2)]


def test_bad_record_is_skipped_and_logged(store, log, open_log):
    """A message that is not a record is skipped, logged with its offset, and replay goes on."""
    store.append([commit("g", 0, 1)], None)
    first_bad = log.append(encode_message_set([b'{"type":"NoSuchRecord"}'])).first_offset
    second_bad = log.append(encode_message_set([b"\xff not json"])).first_offset
    store.append([commit("g", 0, 2)], None)
    store.close()
    with structlog.testing.capture_logs() as events:
        replayed = list(OffsetStore(open_log()).replay())
    assert replayed == [commit("g", 0, 1), commit("g", 0, 2)]
    bad = [e for e in events if e["event"] == "offsets_log.bad_record"]
    assert [e["offset"] for e in bad] == [first_bad, second_bad]
    assert all(e["log_level"] == "error" for e in bad)
    loaded = [e for e in events if e["event"] == "offsets_log.loaded"]
    assert loaded[0]["records"] == 2 and loaded[0]["skipped"] == 2


def test_undecodable_batch_is_skipped_whole(store, log, open_log):
    """A compressed batch whose contents do not decode is skipped as a whole and logged; later records replay."""
    store.append([commit("g", 0, 1)], None)
    bad_offset = log.append(encode_message(b"not gzip at all", MAGIC_V1, CODEC_GZIP)).first_offset
    store.append([commit("g", 0, 2), commit("g", 1, 2)], None)
    store.close()
    with structlog.testing.capture_logs() as events:
        replayed = list(OffsetStore(open_log()).replay())
    assert replayed == [commit("g", 0, 1), commit("g", 0, 2), commit("g", 1, 2)]
    assert [e["offset"] for e in events if e["event"] == "offsets_log.bad_record"] == [bad_offset]
