"""Choosing a partition for a message: ``partitioner(topic, key, num_partitions) -> int``.

The producer calls its partitioner with the serialized key (``None`` when the message
has none) and the topic's partition count, only when the caller did not name a
partition, and maybe not at all for a topic with one partition. It runs in the thread
that calls ``send`` (partitioning happens before queueing, seed 003), except for
messages sent before the topic's partition count was known: the send thread partitions
those, holding the producer's lock, once it learns the count. So a partitioner must be
quick, return a number in ``0 .. num_partitions - 1``, and not call the producer.

- :class:`DefaultPartitioner`: a key goes to ``murmur2(key) & 0x7fffffff % n``, exactly
  Kafka's DefaultPartitioner, so a key maps to the same partition in every process and
  every release (and in Kafka's Java client); no key goes round robin per topic.
- :class:`RoundRobinPartitioner`: every message round robin per topic, keys ignored.
- :class:`RandomPartitioner`: every message to a random partition (seed 002's "random
  load balancing").

Round-robin counters start at a random partition so that many producers started
together do not all begin with partition 0. Thread-safe (``next`` on an
``itertools.count`` is atomic in CPython).
"""

from __future__ import annotations

import itertools
import random
import struct
from collections.abc import Callable
from typing import Union

__all__ = ["Partitioner", "DefaultPartitioner", "RoundRobinPartitioner", "RandomPartitioner", "murmur2",
           "partitioner_for"]

Partitioner = Callable[[str, Union[bytes, None], int], int]

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 hash of ``data`` (``Utils.murmur2``), as a signed int32."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    words = length // 4
    for k in struct.unpack_from(f"<{words}I", data):
        k = (k * _M) & _MASK
        k ^= k >> 24
        h = ((h * _M) & _MASK) ^ ((k * _M) & _MASK)
    tail = words * 4
    extra = length - tail
    if extra == 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h = ((h ^ data[tail]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


class _RoundRobin:
    def __init__(self) -> None:
        self._counters: dict[str, itertools.count[int]] = {}

    def _counter(self, topic: str) -> itertools.count[int]:
        return self._counters.setdefault(topic, itertools.count(random.randrange(1 << 16)))

    def _next(self, topic: str, num_partitions: int) -> int:
        return next(self._counters.get(topic) or self._counter(topic)) % num_partitions


class DefaultPartitioner(_RoundRobin):
    """Keys by Kafka's murmur2 hash; messages without a key round robin per topic."""

    def __call__(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        if key is None:  # _next, inlined: this runs for every message sent without a key
            return next(self._counters.get(topic) or self._counter(topic)) % num_partitions
        return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class RoundRobinPartitioner(_RoundRobin):
    """Every message to the next partition of its topic, whatever its key."""

    def __call__(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        return self._next(topic, num_partitions)


class RandomPartitioner:
    """Every message to a uniformly random partition."""

    def __call__(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        return random.randrange(num_partitions)


_BY_NAME: dict[str, Callable[[], Partitioner]] = {
    "default": DefaultPartitioner,
    "round_robin": RoundRobinPartitioner,
    "random": RandomPartitioner,
}


def partitioner_for(value: object) -> Partitioner:
    """The ``partitioner`` setting: a name (default, round_robin, random) or a callable."""
    if isinstance(value, str):
        factory = _BY_NAME.get(value)
        if factory is None:
            raise ValueError(f"expected one of {', '.join(sorted(_BY_NAME))} or a callable, got {value!r}")
        return factory()
    if callable(value):
        return value
    raise TypeError(f"expected a partitioner name or a callable, got {value!r}")
