"""Which partition of the groups topic holds a group: Kafka's mapping, ported exactly.

In a cluster each group's state lives in one partition of the internal topic
``__rill_groups`` (rill.client.topic_names.GROUPS_TOPIC), and the leader of that partition
is the group's coordinator. The partition is Kafka's ``GroupMetadataManager.partitionFor``:
``abs(groupId.hashCode) % offsets.topic.num.partitions``, where ``hashCode`` is Java's
``String.hashCode`` (``h = 31 * h + c`` over the UTF-16 code units, wrapped to a signed
32-bit integer) and ``abs`` maps ``Integer.MIN_VALUE`` to 0 (Kafka's ``Utils.abs``).

The hash must be stable across processes and machines (Python's ``hash(str)`` is salted
per process), and porting Java's gives the very partition Kafka would choose, so a group
lands where a Kafka user expects it.
"""

from __future__ import annotations

__all__ = ["java_string_hash", "partition_for"]

_MASK = 0xFFFFFFFF
_INT_MIN = -(1 << 31)


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` of ``text``: a signed 32-bit integer."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & _MASK
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group: str, partitions: int) -> int:
    """The partition of the groups topic that holds ``group``, of ``partitions`` (>= 1)."""
    if partitions < 1:
        raise ValueError(f"the groups topic has at least one partition, not {partitions}")
    h = java_string_hash(group)
    return (0 if h == _INT_MIN else abs(h)) % partitions
