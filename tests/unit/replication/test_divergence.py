"""Leader epochs decide where a follower's log leaves its leader's: KIP-101's and KIP-279's traces, replayed.

Each replica is a list of 100-byte messages (message i at byte offset 100 * i) with a real
leader-epoch cache on disk; a fetch loop copies the leader's bytes the way the replica
fetcher does, cutting the follower back whenever the leader names a divergence.
"""

from __future__ import annotations

from pathlib import Path

from rill.broker.log.leader_epochs import EpochEntry, LeaderEpochCache
from rill.broker.replication.divergence import EpochEnd, epoch_span, follower_truncation, leader_divergence
from rill.client.protocol.replica_fetch import NO_EPOCH

SIZE = 100


class Replica:
    """A log of named 100-byte messages and its leader-epoch cache."""

    def __init__(self, directory: Path, epochs: dict[int, int], messages: list[str]) -> None:
        directory.mkdir()
        self.cache = LeaderEpochCache(str(directory))
        for epoch, start in sorted(epochs.items()):
            self.cache.assign(epoch, start * SIZE)
        self.messages = list(messages)
        self.high_watermark = 0

    @property
    def end(self) -> int:
        return len(self.messages) * SIZE

    def lead(self, epoch: int, *written: str) -> None:
        """Become leader in ``epoch`` (recording where it began) and append ``written``."""
        self.cache.assign(epoch, self.end)
        self.messages.extend(written)

    def truncate(self, offset: int) -> None:
        del self.messages[offset // SIZE:]
        self.cache.truncate_from_end(offset)


def replicate(leader: Replica, follower: Replica, max_rounds: int = 20) -> int:
    """Fetch until the follower has the leader's whole log; returns how many fetches were cut back."""
    cuts = 0
    for _ in range(max_rounds):
        last = follower.cache.latest_epoch()
        diverging = leader_divergence(leader.cache, last, follower.end, leader.end)
        if diverging is not None:
            offset, _ = follower_truncation(follower.cache, diverging, follower.end, follower.high_watermark)
            assert offset < follower.end or offset == follower.end == 0
            follower.truncate(offset)
            cuts += 1
            continue
        if follower.end == leader.end:
            return cuts
        span = epoch_span(leader.cache.entries(), follower.end, leader.end)
        copied = leader.messages[follower.end // SIZE:span.end_offset // SIZE]
        if span.epoch > follower.cache.latest_epoch():
            follower.cache.assign(span.epoch, follower.end)
        follower.messages.extend(copied)
    raise AssertionError("replication did not converge")


def test_trace_a_acknowledged_message_survives_a_restart_then_a_failover(tmp_path: Path) -> None:
    """KIP-101 trace A: the follower keeps m2 across its restart (no cut to its stale HW), leads with it, and
    the old leader, returning, keeps m2 and fetches m3 without cutting anything."""
    b = Replica(tmp_path / "b", {0: 0}, ["m1", "m2"])
    a = Replica(tmp_path / "a", {0: 0}, ["m1", "m2"])  # fetched both; its HW was still 0 when it restarted
    a.lead(1, "m3")
    assert replicate(a, b) == 0
    assert b.messages == a.messages == ["m1", "m2", "m3"]


def test_trace_b_a_diverged_tail_is_cut_and_the_logs_end_identical(tmp_path: Path) -> None:
    """KIP-101 trace B: after both crash, the replica that kept m2 cuts it when the new leader wrote m3 there."""
    a = Replica(tmp_path / "a", {0: 0}, ["m1", "m2"])
    b = Replica(tmp_path / "b", {0: 0}, ["m1"])  # m2 was never flushed on b
    b.lead(1, "m3")
    a.high_watermark = 2 * SIZE  # a's checkpointed HW: truncating to it would keep m2
    assert replicate(b, a) == 1
    assert a.messages == b.messages == ["m1", "m3"]
    assert [tuple(e) for e in a.cache.entries()] == [(0, 0), (1, SIZE)]


def test_kip_279_quick_successive_unclean_elections_do_not_leave_a_diverged_prefix(tmp_path: Path) -> None:
    """KIP-279's table, step 6: the follower with epochs {0, 1, 3} cuts twice (to 2, then to 1) and ends with the
    leader's log, not 'a b f e g h'."""
    leader = Replica(tmp_path / "100", {0: 0, 2: 1, 4: 4}, ["a", "c", "d", "e", "g", "h"])
    follower = Replica(tmp_path / "101", {0: 0, 1: 1, 3: 2}, ["a", "b", "f"])
    assert replicate(leader, follower) == 2
    assert follower.messages == ["a", "c", "d", "e", "g", "h"]
    assert [tuple(e) for e in follower.cache.entries()] == [(0, 0), (2, SIZE), (4, 4 * SIZE)]


def test_follower_with_no_epoch_is_never_reported_diverging(tmp_path: Path) -> None:
    """An empty follower (no epoch yet) fetches from 0 without a check."""
    leader = Replica(tmp_path / "l", {3: 0}, ["x"])
    assert leader_divergence(leader.cache, NO_EPOCH, 0, leader.end) is None


def test_follower_ahead_in_the_current_epoch_is_cut_to_the_leaders_end(tmp_path: Path) -> None:
    """Same epoch, but the follower holds bytes past the leader's end (a leader that lost its tail): cut to it."""
    leader = Replica(tmp_path / "l", {0: 0}, ["a"])
    follower = Replica(tmp_path / "f", {0: 0}, ["a", "b", "c"])
    assert leader_divergence(leader.cache, 0, follower.end, leader.end) == EpochEnd(0, SIZE)
    assert follower_truncation(follower.cache, EpochEnd(0, SIZE), follower.end, 0) == (SIZE, True)


def test_leader_naming_no_epoch_falls_back_to_the_followers_high_watermark(tmp_path: Path) -> None:
    """When the leader can name no epoch, the follower keeps its committed prefix (its HW) and no more."""
    follower = Replica(tmp_path / "f", {0: 0}, ["a", "b", "c"])
    assert follower_truncation(follower.cache, EpochEnd(NO_EPOCH, -1), follower.end, SIZE) == (SIZE, True)


def test_epoch_span_caps_a_read_at_the_next_epoch() -> None:
    """A read never spans two epochs: it ends where the next epoch begins, or at the leader's end."""
    entries = [EpochEntry(0, 0), EpochEntry(2, 300), EpochEntry(5, 900)]
    assert epoch_span(entries, 0, 1200) == EpochEnd(0, 300)
    assert epoch_span(entries, 300, 1200) == EpochEnd(2, 900)
    assert epoch_span(entries, 950, 1200) == EpochEnd(5, 1200)
    assert epoch_span([], 0, 50) == EpochEnd(NO_EPOCH, 50)
