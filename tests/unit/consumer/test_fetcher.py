"""The fetcher with a fake broker channel: pipelining, bounds, per-partition errors, stale results."""

from __future__ import annotations

import selectors
from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from rill.client.clock import FakeClock
from rill.client.consumer.fetcher import FetchConfig, Fetcher
from rill.client.consumer.metadata_refresh import MetadataRefresh
from rill.client.consumer.offset_fetcher import OffsetFetcher
from rill.client.consumer.subscription import EARLIEST, LATEST, SubscriptionState, TopicPartition
from rill.client.errors import CorruptMessageError, ErrorCode, OffsetOutOfRange
from rill.client.protocol.messages import encode_message, encode_message_set
from rill.client.net.selector_loop import SelectorLoop

from tests.unit.consumer.conftest import FakeMetadata, PeerBroker

A, B = TopicPartition("t", 0), TopicPartition("t", 1)
CONFIG = FetchConfig(max_bytes=1000, max_partition_bytes=400, max_wait_ms=100, min_bytes=1, request_timeout=5.0,
                     retry_backoff=0.1)


class Rig:
    def __init__(self, reset: str = EARLIEST, offsets: dict[TopicPartition, int] | None = None) -> None:
        self.clock = FakeClock(1000.0)
        self.sub = SubscriptionState(reset)
        self.sub.assign(offsets if offsets is not None else {A: 0})
        self.network = SelectorLoop()
        self.fetcher = Fetcher(self.sub, FakeMetadata(), self.network, CONFIG, self.clock)  # type: ignore[arg-type]
        self.channel = PeerBroker()
        self.fetcher.channels[0] = self.channel.channel

    def respond(self, blocks: list[tuple[int, bytes]]) -> None:
        self.channel.respond(blocks)
        self.fetcher.handle(self.channel.channel, selectors.EVENT_READ)

    def reconnects(self) -> list[PeerBroker]:
        """Make every new connection a fresh PeerBroker; returns the list they are added to."""
        opened: list[PeerBroker] = []

        def open_channel(node: int, broker: object, now: float) -> object:
            self.channel = PeerBroker()
            opened.append(self.channel)
            return self.channel.channel

        self.fetcher._open_channel = open_channel  # type: ignore[method-assign,assignment]
        return opened

    def last_fetch(self) -> dict[TopicPartition, tuple[int, int]]:
        return {TopicPartition(f.topic, f.partition): (f.offset, f.max_size) for f in self.channel.sent[-1].fetches}


@pytest.fixture
def rig() -> Iterator[Rig]:
    r = Rig()
    yield r
    r.network.close()


def messages(*payloads: bytes) -> bytes:
    return encode_message_set(list(payloads))


def test_fetched_messages_come_back_in_order_and_move_the_position(rig: Rig) -> None:
    """A response's messages are returned by take(), and the position moves past them."""
    assert rig.fetcher.send_fetches() == 1
    assert rig.last_fetch() == {A: (0, 400)}
    data = messages(b"a", b"b", b"c")
    rig.respond([(0, data)])
    taken = rig.fetcher.take(10)
    assert [m.value for m in taken] == [b"a", b"b", b"c"]
    assert rig.sub.positions() == {A: len(data)}


def test_take_splits_a_chunk_at_max_records(rig: Rig) -> None:
    """max_records cuts a chunk; the position is after the last message returned."""
    rig.fetcher.send_fetches()
    rig.respond([(0, messages(b"a", b"b", b"c"))])
    first = rig.fetcher.take(2)
    assert [m.value for m in first] == [b"a", b"b"]
    assert rig.sub.positions() == {A: first[-1].next_offset}
    assert [m.value for m in rig.fetcher.take(2)] == [b"c"]


def test_the_next_fetch_goes_out_before_the_chunk_is_returned(rig: Rig) -> None:
    """Pipelining: a partition with one chunk buffered is fetched again from the chunk's end;
    with two buffered it is not, until poll() has returned the first (memory bound)."""
    rig.fetcher.send_fetches()
    first = messages(b"a", b"b")
    rig.respond([(0, first)])
    assert rig.fetcher.send_fetches() == 1
    assert rig.last_fetch() == {A: (len(first), 400)}
    rig.respond([(0, encode_message(b"c"))])
    assert rig.fetcher.send_fetches() == 0
    assert rig.fetcher.buffered_records() == 3
    assert [m.value for m in rig.fetcher.take(2)] == [b"a", b"b"]
    assert rig.fetcher.send_fetches() == 1


def test_partitions_share_fetch_max_bytes(rig: Rig) -> None:
    """Each partition of a request gets fetch.max.bytes / partitions, at most max.partition.fetch.bytes."""
    rig.sub.assign({TopicPartition("t", p): 0 for p in range(4)})
    rig.fetcher.send_fetches()
    assert {size for _, size in rig.last_fetch().values()} == {250}


def test_results_fetched_before_a_seek_are_dropped(rig: Rig) -> None:
    """A response for a partition seeked meanwhile is not returned; the stale long poll is abandoned."""
    rig.fetcher.send_fetches()
    rig.sub.seek(A, 0)
    rig.respond([(0, messages(b"old"))])
    assert rig.fetcher.take(10) == []
    assert rig.fetcher.buffered_records() == 0
    rig.fetcher.send_fetches()  # nothing in flight now: a fresh fetch on the same channel
    assert rig.last_fetch() == {A: (0, 400)}
    first = rig.channel
    opened = rig.reconnects()
    rig.sub.seek(A, 0)
    rig.fetcher.send_fetches()  # the in-flight fetch is all stale: the connection is dropped
    assert first.closed and len(opened) == 1 and rig.last_fetch() == {A: (0, 400)}


def test_no_long_poll_while_a_partition_is_held_back(rig: Rig) -> None:
    """With a partition held back (two chunks buffered) the request is not a long poll, so that
    partition is not stuck behind a broker's wait once poll() has drained it."""
    rig.sub.assign({A: 0, B: 0})
    rig.fetcher.send_fetches()
    assert rig.channel.sent[-1].max_wait_ms == 100
    rig.respond([(0, messages(b"a1")), (0, b"")])
    rig.fetcher.send_fetches()
    rig.respond([(0, messages(b"a2")), (0, b"")])  # A now holds two chunks
    rig.fetcher.send_fetches()
    assert set(rig.last_fetch()) == {B} and rig.channel.sent[-1].max_wait_ms == 0
    rig.respond([(0, b"")])
    assert [m.value for m in rig.fetcher.take(1)] == [b"a1"]
    rig.fetcher.send_fetches()
    assert set(rig.last_fetch()) == {A, B} and rig.channel.sent[-1].max_wait_ms == 100


def test_a_long_poll_is_abandoned_for_a_partition_that_can_be_fetched_again(rig: Rig) -> None:
    """A resumed partition does not wait behind another partition's long poll: the connection is reopened
    and both are fetched."""
    rig.sub.assign({A: 0, B: 0})
    rig.sub.pause([B])
    rig.fetcher.send_fetches()
    assert set(rig.last_fetch()) == {A}
    first = rig.channel
    opened = rig.reconnects()
    rig.sub.resume([B])
    assert rig.fetcher.send_fetches() == 1
    assert first.closed and len(opened) == 1 and set(rig.last_fetch()) == {A, B}


def test_offset_out_of_range_resets_by_policy_and_says_so(rig: Rig) -> None:
    """OffsetOutOfRange requests a reset (earliest) and logs consumer.offset_out_of_range."""
    rig.fetcher.send_fetches()
    with capture_logs() as logs:
        rig.respond([(ErrorCode.OFFSET_OUT_OF_RANGE, b"")])
    assert rig.sub.needs_reset() == [A]
    event = next(e for e in logs if e["event"] == "consumer.offset_out_of_range")
    assert (event["topic"], event["partition"], event["offset"], event["reset"]) == ("t", 0, 0, "earliest")


def test_offset_out_of_range_with_reset_none_fails_the_partition() -> None:
    """With auto.offset.reset none the partition fails with OffsetOutOfRange."""
    rig = Rig(reset="none")
    rig.fetcher.send_fetches()
    rig.respond([(ErrorCode.OFFSET_OUT_OF_RANGE, b"")])
    [(tp, error)] = rig.sub.errors()
    assert tp == A and isinstance(error, OffsetOutOfRange)
    rig.network.close()


def test_reset_positions_looks_up_earliest_or_latest(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """Partitions waiting for a reset get the offset OFFSETS answers; a failed lookup is retried later."""
    rig.sub.assign({A: -1, B: -1})
    rig.sub.request_reset(B, LATEST)
    calls: list[tuple[TopicPartition, int]] = []

    def offset_for(tp: TopicPartition, time_value: int) -> int:
        calls.append((tp, time_value))
        if tp == B and len(calls) == 2:
            raise ConnectionError("down")
        return 7 if time_value == -2 else 99

    offsets = OffsetFetcher(rig.sub, FakeMetadata(), rig.fetcher, CONFIG, rig.clock)  # type: ignore[arg-type]
    monkeypatch.setattr(offsets, "offset_for", offset_for)
    offsets.reset_positions()
    assert rig.sub.positions() == {A: 7}
    offsets.reset_positions()  # B waits for the backoff (kept by the fetcher)
    assert len(calls) == 2
    assert rig.fetcher.next_deadline(rig.clock.now) == pytest.approx(rig.clock.now + 0.1)
    rig.clock.advance(0.2)
    offsets.reset_positions()
    assert rig.sub.positions() == {A: 7, B: 99}


def test_resets_of_leaderless_partitions_wait_for_one_backed_off_refresh(rig: Rig) -> None:
    """Partitions of a topic with no known leader make at most one metadata refresh per poll turn (the
    poll loop's, with its backoff), not one per partition; user lookups refresh once for all of them."""
    unknown = [TopicPartition("u", p) for p in range(4)]  # FakeMetadata knows only topic "t"
    rig.sub.assign({tp: -1 for tp in unknown})
    metadata = FakeMetadata()
    rig.fetcher.metadata = metadata  # type: ignore[assignment]
    refresh = MetadataRefresh(metadata, rig.sub, rig.fetcher, None, max_age=30.0,  # type: ignore[arg-type]
                              retry_backoff=0.1)
    offsets = OffsetFetcher(rig.sub, metadata, rig.fetcher, CONFIG, rig.clock)  # type: ignore[arg-type]

    def turn() -> None:  # what each turn of poll()'s loop does with metadata and resets
        refresh.maybe_refresh(rig.clock.now)
        offsets.reset_positions()

    turn()
    assert metadata.refreshes == 1 and rig.fetcher.needs_metadata
    assert rig.sub.needs_reset() == unknown
    turn()  # within retry.backoff.ms: no refresh
    assert metadata.refreshes == 1
    assert refresh.next_deadline(rig.clock.now) == pytest.approx(rig.clock.now + 0.1)
    rig.clock.advance(0.11)
    turn()
    assert metadata.refreshes == 2
    offsets.refresh_leaders(unknown)  # end_offsets()/beginning_offsets(): one refresh for every partition
    assert metadata.refreshes == 3
    with pytest.raises(LookupError):
        offsets.offset_for(unknown[0], -2)
    assert metadata.refreshes == 3


def test_a_corrupt_message_fails_the_partition_after_the_good_ones(rig: Rig) -> None:
    """Messages before a CRC failure are returned; then the partition fails and is not fetched."""
    bad = bytearray(encode_message(b"payload"))
    bad[-1] ^= 0xFF
    good = messages(b"a", b"b")
    rig.fetcher.send_fetches()
    rig.respond([(0, good + bytes(bad) + encode_message(b"after"))])
    assert rig.fetcher.send_fetches() == 0  # nothing after a corrupt message is fetched
    assert [m.value for m in rig.fetcher.take(10)] == [b"a", b"b"]
    [(tp, error)] = rig.sub.errors()
    assert isinstance(error, CorruptMessageError) and f"offset {len(good)}" in str(error)
    assert rig.sub.positions() == {A: len(good)}


def test_a_message_bigger_than_the_fetch_size_grows_the_next_fetch(rig: Rig) -> None:
    """A partial first message makes the next fetch of that partition large enough for it."""
    big = encode_message(b"x" * 1000)
    rig.fetcher.send_fetches()
    with capture_logs() as logs:
        rig.respond([(0, big[:400])])
    assert "consumer.fetch_size_too_small" in [e["event"] for e in logs]
    rig.fetcher.send_fetches()
    assert rig.last_fetch() == {A: (0, len(big))}
    rig.respond([(0, big)])
    assert [len(m.value) for m in rig.fetcher.take(10)] == [1000]
    rig.fetcher.send_fetches()
    assert rig.last_fetch() == {A: (len(big), 400)}


def test_retriable_errors_are_retried_after_the_backoff(rig: Rig) -> None:
    """A StorageError is logged and the partition fetched again after retry.backoff.ms."""
    rig.fetcher.send_fetches()
    rig.respond([(ErrorCode.STORAGE_ERROR, b"")])
    assert rig.sub.errors() == []
    assert rig.fetcher.send_fetches() == 0
    assert rig.fetcher.next_deadline(rig.clock.now) == pytest.approx(rig.clock.now + 0.1)
    rig.clock.advance(0.11)
    assert rig.fetcher.send_fetches() == 1


def test_a_broken_connection_retries_after_backoff_and_refreshes_metadata(rig: Rig) -> None:
    """In-flight fetches on a failed connection are lost, retried later, and metadata is asked for."""
    rig.fetcher.send_fetches()
    rig.channel.hang_up()
    with capture_logs() as logs:
        rig.fetcher.handle(rig.channel.channel, selectors.EVENT_READ)
    assert "consumer.fetch_failed" in [e["event"] for e in logs]
    assert rig.fetcher.needs_metadata and 0 not in rig.fetcher.channels
    assert rig.fetcher.send_fetches() == 0  # backoff


def test_request_timeout_closes_the_channel(rig: Rig) -> None:
    """A fetch unanswered for request.timeout.ms plus the long-poll wait fails its connection."""
    rig.fetcher.send_fetches()
    rig.clock.advance(5.2)
    rig.fetcher.check_timeouts()
    assert rig.channel.closed and rig.fetcher.needs_metadata


def test_paused_partitions_keep_their_chunks(rig: Rig) -> None:
    """Chunks of a paused partition are neither returned nor dropped, and it is not fetched."""
    rig.sub.assign({A: 0, B: 0})
    rig.fetcher.send_fetches()
    rig.respond([(0, messages(b"a")), (0, messages(b"b"))])
    rig.sub.pause([A])
    assert [m.value for m in rig.fetcher.take(10)] == [b"b"]
    rig.fetcher.send_fetches()
    assert set(rig.last_fetch()) == {B}
    rig.sub.resume([A])
    assert [m.value for m in rig.fetcher.take(10)] == [b"a"]
