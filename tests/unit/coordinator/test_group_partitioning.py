"""A group's partition of __rill_groups is Kafka's: abs(Java String.hashCode) % partitions."""

from __future__ import annotations

import pytest

from rill.coordinator.group_partitioning import java_string_hash, partition_for

# (String.hashCode, abs(hashCode) % 50) printed by Java 17 on this machine for each name
JAVA = {
    "my-group": (-1906497762, 12),
    "orders-app": (772757305, 5),
    "console-consumer-12345": (158455506, 6),
    "polygenelubricants": (-2147483648, 0),  # Integer.MIN_VALUE: Kafka's Utils.abs gives 0
    "\u00e9t\u00e9": (227742, 42),            # non-ASCII: UTF-16 code units
    "\U0001F600grp": (1276929186, 36),         # outside the BMP: a surrogate pair, as Java sees it
    "a": (97, 47),
    "group-0": (293427298, 48),
    "group-7": (293427305, 5),
}


@pytest.mark.parametrize("name", sorted(JAVA))
def test_the_hash_and_the_partition_are_javas(name: str) -> None:
    hash_code, partition = JAVA[name]
    assert java_string_hash(name) == hash_code
    assert partition_for(name, 50) == partition


def test_every_partition_is_in_range_and_used() -> None:
    seen = {partition_for(f"group-{i}", 7) for i in range(500)}
    assert seen == set(range(7))
    assert partition_for("", 3) == 0


def test_no_partitions_is_refused() -> None:
    with pytest.raises(ValueError):
        partition_for("g", 0)
