"""One REPLICA_FETCH answer applied to a follower replica: append, truncate, restart, or wait.

The replica fetcher (replica_fetcher.py) sends a leader one request for many partitions;
each partition's block in the answer is applied here, to that partition's
:class:`~rill.broker.replication.replica.Replica`, by :func:`apply_block` (Kafka's
``ReplicaFetcherThread.processPartitionData``, ``truncate`` and
``handleOutOfRangeError``). What a block can say, and what the follower does:

==========================================  ==========================================================
block                                       follower
==========================================  ==========================================================
error 0, ``DIVERGING_EPOCH`` set            cut its log back where the epochs say (``follower_truncation``),
                                            dropping cache entries that now hold no data; the next
                                            request carries the new latest epoch (KIP-279's loop)
error 0, messages                           record ``(EPOCH, fetch offset)`` in the epoch cache when
                                            ``EPOCH`` is newer than its latest, then append (every CRC
                                            is checked by ``Log.append``; bytes that fail are never kept)
error 0 (every one)                         high watermark = ``min(HIGH_WATERMARK, log end)``
OffsetOutOfRange, fetch offset below        move the whole log aside and start empty at the leader's
``LOG_START_OFFSET``                        start (retention removed what it needed)
any other error                             back off: the controller will name the new leader or epoch
==========================================  ==========================================================

Invariants kept: the log only grows by appends at the fetch offset (the caller checked
that the log end still equals it), so it stays a byte prefix of the leader's; an epoch
entry is written before the bytes it covers (a crash in between leaves an entry with
no data, which a later entry at the same offset replaces), and is taken back when the
append is refused; a cut always lands on an offset the leader named or the follower's
own epoch boundaries give, both message boundaries.

Thread-safety: :func:`apply_block` runs on the replica's fetcher thread, with
``replica.lock`` held by the caller, which has also checked that the replica is still
fetched by that thread, with the leader epoch and log end the request was built with.
"""

from __future__ import annotations

import enum
from typing import Any

from rill.broker.replication.divergence import EpochEnd, follower_truncation
from rill.broker.replication.replica import Replica
from rill.client.errors import ErrorCode, InvalidMessage, InvalidOffset, MessageTooLarge, StorageError
from rill.client.protocol.replica_fetch import NO_EPOCH, ReplicaFetchBlock

__all__ = ["BlockOutcome", "apply_block"]


class BlockOutcome(enum.Enum):
    """What the fetcher does with the partition after a block."""

    FETCHED = "fetched"  # error 0 handled (data, a cut, or nothing new): fetch again at once
    BACK_OFF = "back_off"  # retry after replica.fetch.backoff.ms (the block was logged here if it was news)
    FAILED = "failed"  # the partition's log or epoch file failed: stop fetching it (logged here)


def apply_block(replica: Replica, block: ReplicaFetchBlock, fetch_offset: int, logger: Any) -> BlockOutcome:
    """Apply the leader's answer ``block`` for ``replica``, fetched from ``fetch_offset``.

    ``logger`` is bound to the partition (topic, partition, leader). The caller holds
    ``replica.lock`` and has checked ``replica.log.end_offset == fetch_offset``.

    Returns:
        FETCHED, BACK_OFF or FAILED (:class:`BlockOutcome`). Errors other than 0 and
        OffsetOutOfRange give BACK_OFF without a log line: the caller logs them, rate limited.

    Raises:
        Nothing from the log or the epoch file: a StorageError or OSError there gives
        FAILED (logged as ``replica.log_failed``).
    """
    try:
        if block.error == ErrorCode.NONE:
            outcome = _apply_data(replica, block, fetch_offset, logger)
            replica.follower_high_watermark = min(block.high_watermark, replica.log.end_offset)
            if block.log_start_offset > replica.log.start_offset:
                _follow_log_start(replica, block.log_start_offset, logger)
            return outcome
        if block.error == ErrorCode.OFFSET_OUT_OF_RANGE:
            return _out_of_range(replica, block, fetch_offset, logger)
        return BlockOutcome.BACK_OFF
    except (StorageError, OSError) as exc:
        logger.error("replica.log_failed", fetch_offset=fetch_offset, error=str(exc),
                     hint="fetching of this partition stops until its role is given again")
        return BlockOutcome.FAILED


def _follow_log_start(replica: Replica, leader_start: int, logger: Any) -> None:
    """Delete the whole segments that end at or before the leader's log start (Kafka's KIP-107 step:
    a follower's log starts no earlier than its leader's, so what the leader compacted or let go
    by retention goes here too)."""
    def ending_by(segments: tuple[Any, ...]) -> int:
        count = 0
        for segment in segments[:-1]:  # never the active segment
            if segment.end_offset > leader_start:
                break
            count += 1
        return count

    deleted = replica.log.delete_oldest_segments(ending_by)
    if deleted:
        logger.info("replica.log_start_followed", leader_start_offset=leader_start, deleted_segments=len(deleted),
                    start_offset=replica.log.start_offset)


def _apply_data(replica: Replica, block: ReplicaFetchBlock, fetch_offset: int, logger: Any) -> BlockOutcome:
    if block.diverging_epoch != NO_EPOCH:
        return _truncate(replica, block, logger)
    if block.messages:
        return _append(replica, block, fetch_offset, logger)
    return BlockOutcome.FETCHED


def _append(replica: Replica, block: ReplicaFetchBlock, fetch_offset: int, logger: Any) -> BlockOutcome:
    """Append the block's messages at ``fetch_offset`` (the log end), recording a new epoch first."""
    epochs = replica.epochs
    latest = epochs.latest_epoch()
    if block.epoch != NO_EPOCH and block.epoch < latest:
        logger.error("replica.stale_epoch_data", fetch_offset=fetch_offset, block_epoch=block.epoch,
                     latest_epoch=latest, hint="the leader sent bytes of an epoch older than this replica's latest")
        return BlockOutcome.BACK_OFF
    assigned = block.epoch > latest
    if assigned:
        epochs.assign(block.epoch, fetch_offset)
    try:
        replica.log.append(block.messages)
    except (InvalidMessage, MessageTooLarge) as exc:
        if assigned:
            epochs.truncate_from_end(fetch_offset)  # the entry covers no bytes: take it back
        logger.error("replica.invalid_data", fetch_offset=fetch_offset, bytes=len(block.messages), error=str(exc),
                     hint="the leader sent bytes that fail their checks; nothing was appended")
        return BlockOutcome.BACK_OFF
    return BlockOutcome.FETCHED


def _truncate(replica: Replica, block: ReplicaFetchBlock, logger: Any) -> BlockOutcome:
    """Cut the log back to where the leader's named divergence says (KIP-279's step)."""
    log, epochs = replica.log, replica.epochs
    end, entries = log.end_offset, epochs.entries()
    diverging = EpochEnd(block.diverging_epoch, block.diverging_end_offset)
    offset, settled = follower_truncation(epochs, diverging, end, replica.high_watermark)
    try:
        if offset < log.start_offset:  # all this log holds is past the divergence (Kafka's Log.truncateTo)
            log.truncate_fully_and_start_at(offset)
        else:
            log.truncate_to(offset)
            epochs.truncate_from_end(offset)  # entries at the log end hold no data (a cut of 0 bytes keeps them)
    except InvalidOffset as exc:
        logger.error("replica.bad_divergence", diverging_epoch=diverging.epoch,
                     diverging_end_offset=diverging.end_offset, to_offset=offset, error=str(exc))
        return BlockOutcome.BACK_OFF
    if log.end_offset == end and epochs.entries() == entries:  # the same request would get the same answer
        logger.warning("replica.divergence_unresolved", diverging_epoch=diverging.epoch,
                       diverging_end_offset=diverging.end_offset, log_end_offset=end,
                       latest_epoch=epochs.latest_epoch())
        return BlockOutcome.BACK_OFF
    logger.info("replica.truncated", from_offset=end, to_offset=log.end_offset, diverging_epoch=diverging.epoch,
                diverging_end_offset=diverging.end_offset, settled=settled)
    return BlockOutcome.FETCHED


def _out_of_range(replica: Replica, block: ReplicaFetchBlock, fetch_offset: int, logger: Any) -> BlockOutcome:
    """OffsetOutOfRange: below the leader's start, restart there; otherwise wait (Kafka's handleOutOfRangeError)."""
    log = replica.log
    if fetch_offset < block.log_start_offset:
        start = log.start_offset
        log.truncate_fully_and_start_at(block.log_start_offset)  # also clears the epoch cache (truncation.py)
        replica.follower_high_watermark = log.end_offset  # a high watermark is never below the log start
        logger.warning("replica.restarted_at_leader_start", from_start_offset=start, from_offset=fetch_offset,
                       to_offset=block.log_start_offset)
        return BlockOutcome.FETCHED
    logger.warning("replica.offset_out_of_range", fetch_offset=fetch_offset, leader_start_offset=block.log_start_offset,
                   leader_high_watermark=block.high_watermark)
    return BlockOutcome.BACK_OFF
