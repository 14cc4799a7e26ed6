"""``failOnDataLoss``: what a read does when retention deleted offsets it was going to read.

A stream's checkpoint, a loader's stored offsets or a planned range can point below a
partition's log start once retention deleted the oldest segments. As in Spark's Kafka
source, the default (``failOnDataLoss=true``) fails with :class:`DataLossError`, whose
message names the option; ``false`` skips the deleted range and goes on at the log
start, logging one ``spark.data_loss`` warning with the topic, the partition and the
skipped range ``[skipped_from, skipped_to)`` (byte offsets).
"""

from __future__ import annotations

import structlog

from rill.client.errors import RillError
from rill.client.structs import TopicPartition

__all__ = ["DataLossError", "skip_deleted", "SOURCE_HINT"]

log = structlog.get_logger(__name__)

SOURCE_HINT = ("if you don't want the query to fail on this, set the source option failOnDataLoss=false "
               "(the deleted range is then skipped with a warning)")


class DataLossError(RillError):
    """Offsets a read needs were deleted (by retention) before it read them, and failOnDataLoss is true."""


def skip_deleted(tp: TopicPartition, start: int, log_start: int, *, fail: bool, hint: str = SOURCE_HINT) -> int:
    """Where to read ``tp`` from when the read should start at ``start`` and the log starts at ``log_start``.

    Returns:
        ``start`` when it is still in the log; else ``log_start`` after a ``spark.data_loss`` warning
        (``fail`` false).

    Raises:
        DataLossError: ``start`` was deleted and ``fail`` is true; the message ends with ``hint``.
    """
    if start >= log_start:
        return start
    if fail:
        raise DataLossError(f"{tp[0]}-{tp[1]}: offsets [{start}, {log_start}) were deleted (by retention) before "
                            f"they were read, so some data was lost; {hint}")
    log.warning("spark.data_loss", topic=tp[0], partition=tp[1], skipped_from=start, skipped_to=log_start,
                skipped_bytes=log_start - start,
                message="some data may have been lost: it is no longer in the log (deleted by retention); "
                        "reading on from the log start (failOnDataLoss=false)")
    return log_start
