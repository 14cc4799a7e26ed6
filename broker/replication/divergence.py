"""Where a follower's log leaves its leader's, decided by leader epochs (Kafka's KIP-101/279/320).

Truncating a follower to its high watermark loses acknowledged data or lets logs
diverge (../shared/notes/replication.md, traces A and B); leader epochs fix both. Each
partition keeps a leader-epoch cache: which epoch began at which byte offset
(broker/log/leader_epochs.py). Three decisions follow from it, as pure functions:

- :func:`leader_divergence` (on the leader, for each REPLICA_FETCH): is the follower's
  ``(last fetched epoch, fetch offset)`` on the leader's log? If not, the answer carries
  no data but the leader's end of that epoch (Kafka's fetch-time check, KIP-320).
- :func:`follower_truncation` (on the follower, when an answer names a divergence):
  the offset to cut back to. When both sides know the epoch the leader named, cut to
  the smaller end of it; when the follower's largest epoch at or below it is another
  one, cut to the end of *that* epoch and ask again (KIP-279's loop), so quick
  successive elections cannot leave a diverged prefix.
- :func:`epoch_span` (on the leader, for each read): the epoch the bytes at an offset
  were written in and where the next epoch begins, so an answer never spans two epochs
  and the follower learns the boundaries from the data.

Every offset these return is a message boundary on both logs: an epoch's start is one on
the leader that wrote it, and the agreed point ends a prefix both logs share.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

from rill.client.protocol.replica_fetch import NO_EPOCH

__all__ = ["EpochLookup", "EpochEnd", "leader_divergence", "follower_truncation", "epoch_span"]


class EpochEnd(NamedTuple):
    epoch: int  # NO_EPOCH: not known
    end_offset: int  # -1 with NO_EPOCH


class EpochLookup(Protocol):
    """The part of a leader-epoch cache these decisions read."""

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]: ...


class EpochStart(Protocol):
    @property
    def epoch(self) -> int: ...

    @property
    def start_offset(self) -> int: ...


def leader_divergence(cache: EpochLookup, last_fetched_epoch: int, fetch_offset: int,
                      leader_end: int) -> EpochEnd | None:
    """The divergence to report to a follower, or None when its position is on this log.

    A follower with no epoch yet (``NO_EPOCH``) is not checked: it has nothing to diverge.
    """
    if last_fetched_epoch == NO_EPOCH:
        return None
    epoch, end = cache.end_offset_for(last_fetched_epoch, leader_end)
    if epoch < last_fetched_epoch or end < fetch_offset:
        return EpochEnd(epoch, end)
    return None


def follower_truncation(cache: EpochLookup, diverging: EpochEnd, log_end: int,
                        high_watermark: int) -> tuple[int, bool]:
    """Where to cut the follower's log, given the divergence its leader named.

    When the leader could name no epoch (it knows none as new as the follower's, which a
    current leader never does: fencing by the current epoch comes first), the follower
    falls back to its high watermark, as Kafka does.

    Returns:
        ``(offset, settled)``: cut back to ``offset`` (never above ``log_end``);
        ``settled`` is False when the follower's epochs disagree with the leader's at that
        point, so its next fetch (carrying its new latest epoch) must be checked again.
    """
    if diverging.epoch == NO_EPOCH or diverging.end_offset < 0:
        return min(high_watermark, log_end), True
    epoch, end = cache.end_offset_for(diverging.epoch, log_end)
    if epoch == NO_EPOCH:
        return min(diverging.end_offset, log_end), True
    if epoch != diverging.epoch:
        return min(end, log_end), False
    return min(diverging.end_offset, end, log_end), True


def epoch_span(entries: Sequence[EpochStart], offset: int, leader_end: int) -> EpochEnd:
    """The epoch in which the bytes at ``offset`` were written and where it ends (the next
    epoch's start, or ``leader_end``); ``NO_EPOCH`` before the first entry (a log older
    than replication, or one that has no epochs)."""
    lo, hi = 0, len(entries)
    while lo < hi:  # the last entry starting at or before offset
        mid = (lo + hi) // 2
        if entries[mid].start_offset <= offset:
            lo = mid + 1
        else:
            hi = mid
    if lo == 0:
        return EpochEnd(NO_EPOCH, entries[0].start_offset if entries else leader_end)
    end = entries[lo].start_offset if lo < len(entries) else leader_end
    return EpochEnd(entries[lo - 1].epoch, end)
