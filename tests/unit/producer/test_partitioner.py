"""Partitioners: Kafka's murmur2 for keys (stable everywhere), round robin without a key, pluggable."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest

from rill.client.producer.partitioner import (DefaultPartitioner, RandomPartitioner, RoundRobinPartitioner, murmur2,
                                              partitioner_for)

# Kafka's own test vectors (clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2)
KAFKA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_matches_kafka() -> None:
    """murmur2 gives Kafka's published values, so keys hash as in Kafka's Java client."""
    assert {key: murmur2(key) for key in KAFKA_MURMUR2} == KAFKA_MURMUR2


@pytest.mark.parametrize("partitions", [1, 2, 3, 7, 12, 100])
def test_keys_go_to_kafkas_partition(partitions: int) -> None:
    """A key goes to toPositive(murmur2(key)) % partitions, Kafka's DefaultPartitioner rule."""
    partitioner = DefaultPartitioner()
    for key, hashed in KAFKA_MURMUR2.items():
        assert partitioner("t", key, partitions) == (hashed & 0x7FFFFFFF) % partitions


def test_fixed_keys_have_fixed_partitions() -> None:
    """These keys map to these partitions in this and every later release."""
    partitioner = DefaultPartitioner()
    assert [partitioner("t", f"user-{i}".encode(), 7) for i in range(10)] == [5, 3, 0, 0, 3, 1, 0, 2, 6, 6]
    assert [partitioner("other", k, 3) for k in (b"", b"a", b"kafka", b"\xff\x00\x10")] == [0, 1, 1, 0]


def test_partition_is_the_same_in_another_process() -> None:
    """The hash does not depend on the process (unlike Python's str hash with PYTHONHASHSEED)."""
    code = ("from rill.client.producer.partitioner import DefaultPartitioner as P; "
            "print([P()('t', b'key-%d' % i, 16) for i in range(20)])")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    partitioner = DefaultPartitioner()
    assert out.strip() == str([partitioner("t", b"key-%d" % i, 16) for i in range(20)])


def test_no_key_round_robins_over_every_partition() -> None:
    """Messages without a key take each partition in turn, so partitions get equal shares."""
    partitioner = DefaultPartitioner()
    picks = [partitioner("t", None, 4) for _ in range(400)]
    assert Counter(picks) == {0: 100, 1: 100, 2: 100, 3: 100}
    assert all((b - a) % 4 == 1 for a, b in zip(picks, picks[1:]))


def test_round_robin_is_per_topic() -> None:
    """Each topic has its own round-robin counter."""
    partitioner = DefaultPartitioner()
    a = [partitioner("a", None, 3) for _ in range(3)]
    b = [partitioner("b", None, 3) for _ in range(3)]
    assert sorted(a) == sorted(b) == [0, 1, 2]


def test_round_robin_partitioner_ignores_keys() -> None:
    """RoundRobinPartitioner spreads keyed messages too."""
    partitioner = RoundRobinPartitioner()
    assert sorted(partitioner("t", b"same", 3) for _ in range(3)) == [0, 1, 2]


def test_random_partitioner_stays_in_range() -> None:
    """RandomPartitioner picks partitions in 0..n-1 and uses all of them."""
    partitioner = RandomPartitioner()
    assert {partitioner("t", None, 3) for _ in range(300)} == {0, 1, 2}


def test_partitioner_setting_takes_names_and_callables() -> None:
    """The partitioner setting is a built-in name or any callable; anything else is refused."""
    assert isinstance(partitioner_for("default"), DefaultPartitioner)
    assert isinstance(partitioner_for("round_robin"), RoundRobinPartitioner)

    def mine(topic: str, key: bytes | None, n: int) -> int:
        return 0

    assert partitioner_for(mine) is mine
    with pytest.raises(ValueError, match="round_robin"):
        partitioner_for("sticky")
    with pytest.raises(TypeError):
        partitioner_for(42)
