"""The producer's queued units: a partition's batches and queue, a topic's state, and
the placeholder for messages of a topic whose partition count is not known yet.

These are plain containers; :class:`~rill.client.producer.accumulator.RecordAccumulator`
owns them and guards them all with its one lock (see that module for readiness, memory
accounting and thread-safety). Sizes are encoded sizes: ``MESSAGE_OVERHEAD + len(payload)``
per message.
"""

from __future__ import annotations

import itertools
import operator
from collections import deque
from collections.abc import Callable, Sequence

from rill.client.producer.future import MESSAGE_OVERHEAD, BatchResult, Completion, SendResponse

__all__ = ["ProducerBatch", "PartitionQueue", "TopicState", "Unassigned", "encoded_ends"]


class ProducerBatch(BatchResult):
    """Messages for one partition, sent together in one produce entry.

    ``size`` is the bytes counted against the buffer (the encoded size when
    uncompressed). ``deadline``: if the batch is ready but cannot be sent by then (no
    leader, broker unreachable) it fails. ``not_before``: retry backoff. ``encoded`` is the
    message set, built once by the send thread (``payloads`` are dropped then, keeping
    only their ``lengths`` for the offsets).
    """

    __slots__ = ("partition", "payloads", "size", "created", "deadline", "attempts", "not_before",
                 "encoded")

    def __init__(self, topic: str, partition: int, created: float, deadline: float) -> None:
        super().__init__(topic)
        self.partition = partition
        self.payloads: list[bytes] = []
        self.size = 0
        self.created = created
        self.deadline = deadline
        self.attempts = 0
        self.not_before = 0.0
        self.encoded: bytes | None = None

    def __repr__(self) -> str:
        return f"<ProducerBatch {self.topic}-{self.partition} {self.size} B attempts={self.attempts}>"


class PartitionQueue:
    """A partition's batches in send order; ``open`` (the last one, or None) takes appends."""

    __slots__ = ("topic", "partition", "batches", "open")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.batches: deque[ProducerBatch] = deque()
        self.open: ProducerBatch | None = None


class Unassigned(Completion):
    """Messages of a topic whose partition count is unknown; resolves when they are partitioned.

    ``entries`` are ``(payloads, key, partition or None, size, response)`` in send order;
    ``batches`` lists the batches they went to (so ``flush`` can wait for those too).
    """

    __slots__ = ("entries", "created", "batches")

    def __init__(self, topic: str, created: float) -> None:
        super().__init__(topic)
        self.created = created
        self.entries: list[tuple[list[bytes], bytes | None, int | None, int, SendResponse]] = []
        self.batches: list[ProducerBatch] = []


class TopicState:
    """What the caller's thread needs of a topic: its partition count (None: unknown) and queues.

    ``available``: the partitions whose broker is alive, when some are not (None: all are).
    """

    __slots__ = ("name", "partitions", "queues", "available")

    def __init__(self, name: str) -> None:
        self.name = name
        self.partitions: int | None = None
        self.queues: list[PartitionQueue] = []
        self.available: tuple[int, ...] | None = None

    def choose(self, partitioner: Callable[[str, bytes | None, int], int], key: bytes | None) -> int:
        """The partition for a message with ``key`` (the count must be known).

        A key goes where the partitioner sends it among all the partitions (so a key keeps
        its partition while a broker is down, and waits for it); a message without a key
        goes only to a partition whose broker is alive, when some are not (Kafka's
        "available partitions"), so a dead broker does not hold up unkeyed traffic.
        """
        count = self.partitions or 0
        if count == 1:
            return 0
        available = self.available
        if key is None and available:
            return available[partitioner(self.name, None, len(available)) % len(available)]
        return partitioner(self.name, key, count)



def encoded_ends(payloads: Sequence[bytes]) -> list[int]:
    """Cumulative encoded sizes: ``result[i]`` is the size of ``payloads[: i + 1]`` as a message set."""
    return list(itertools.accumulate(map(operator.add, map(len, payloads), itertools.repeat(MESSAGE_OVERHEAD))))
