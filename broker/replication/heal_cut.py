"""A healing replica's cut, made by its fetcher thread before its next fetch (replica_healer.py).

The healer does not cut a log itself: it hands the cut to the replica (``replica.pending_cut``)
and the replica's fetcher thread makes it, under ``replica.lock``, just before it builds its
next request (fetcher_thread.py). So no fetch ever leaves with the damaged log end: a fetch
from the old end would tell the leader that the replica still holds everything, and the
leader would add it back to the ISR right before its log is cut below the high watermark.

A cut waits for ``min_leader_epoch``: the healer asks the controller to take the replica out
of the ISR (a new leader epoch where it was in it) and only then lowers the bar to the epoch
the replica is in. It is made only on a follower; a replica elected leader before its cut
keeps its log (the healer drops the cut). What is cut, as on divergence (fetch_block.py):
``Log.truncate_to`` the corrupt range's first byte (a message boundary: the message before it
passed its checks), keeping the cut bytes in a side file (truncation.py), then the
leader-epoch cache's entries from there (``truncate_from_end``); the fetch then copies the
bytes again from the leader, every message CRC-checked on append.

Thread-safety: :func:`make_pending_cut` runs on the fetcher thread with ``replica.lock`` held;
the healer sets and reads a :class:`PendingCut`'s fields under the same lock (``done`` and
the results are written before ``done`` is set, so a reader without the lock that sees
``done`` sees them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rill.broker.log.integrity import CorruptRange
from rill.broker.log.log import Log
from rill.broker.replication.replica import Replica, Role
from rill.client.errors import InvalidOffset, StorageError

__all__ = ["PendingCut", "make_pending_cut", "still_corrupt"]


@dataclass(slots=True)
class PendingCut:
    """A cut of a replica's log back to ``corrupt``'s first byte, due once it is in ``min_leader_epoch``.

    Results, set by the fetcher thread: ``from_offset`` (the log end before the cut), ``error``
    (why nothing was cut, or None), then ``done``.
    """

    corrupt: CorruptRange
    min_leader_epoch: int
    from_offset: int = -1
    error: str | None = None
    done: bool = False


def make_pending_cut(replica: Replica, logger: Any) -> None:
    """Make ``replica``'s pending cut if it is due (a follower in its epoch); nothing otherwise.

    Called with ``replica.lock`` held, on the thread that appends to the replica. Never raises
    for the log: a failed cut is recorded in the cut (and a failed log stays failed).
    """
    cut = replica.pending_cut
    if cut is None or replica.role is not Role.FOLLOWER or replica.leader_epoch < cut.min_leader_epoch:
        return
    replica.pending_cut = None
    log, offset = replica.log, cut.corrupt.offset
    cut.from_offset = log.end_offset
    if not still_corrupt(log, cut.corrupt):
        cut.error = "the range is no longer in the log"
    else:
        try:
            log.truncate_to(offset)
            replica.epochs.truncate_from_end(offset)  # entries at the new end hold no data
        except (InvalidOffset, StorageError, OSError) as exc:
            cut.error = f"the cut failed: {exc}"
    if cut.error is None:
        logger.info("replica.heal_truncated", from_offset=cut.from_offset, to_offset=offset,
                    corrupt_offset=offset, corrupt_bytes=cut.corrupt.length, leader_epoch=replica.leader_epoch,
                    latest_epoch=replica.epochs.latest_epoch())
    cut.done = True


def still_corrupt(log: Log, corrupt: CorruptRange) -> bool:
    """Whether ``log`` still holds ``corrupt`` (not cut away, nor rewritten since it was found)."""
    if corrupt.offset >= log.end_offset:
        return False
    for segment in log.segments:
        if segment.path == corrupt.path and segment.base_offset == corrupt.base_offset:
            return segment.integrity.corrupt_in(corrupt.start, corrupt.start + 1) is not None
    return False
