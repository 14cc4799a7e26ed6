"""Which broker coordinates a group: rendezvous (highest-random-weight) hashing.

Every broker computes the same answer from the same set of live broker ids, with no
coordination: the coordinator of ``group`` is the broker with the highest
:func:`weight` for ``(group, broker_id)`` (ties, practically impossible with 64-bit
weights, go to the higher id). When a broker leaves, only the groups it coordinated
move (each to the broker with its next-highest weight); when a broker joins, only the
groups for which it now has the highest weight move to it: on average 1/n of them
with n brokers, and none between two brokers that stay.

The weight is BLAKE2b (8 bytes) of ``"<group>\\x00<broker_id>"``: stable across
processes, Python versions and machines, unlike ``hash()``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def weight(group: str, broker_id: int) -> int:
    """The 64-bit rendezvous weight of ``broker_id`` for ``group``."""
    digest = hashlib.blake2b(f"{group}\x00{broker_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def coordinator_for(group: str, broker_ids: Iterable[int]) -> int | None:
    """The id of the broker that coordinates ``group`` among ``broker_ids``; None when there is none."""
    best: tuple[int, int] | None = None
    for broker_id in broker_ids:
        key = (weight(group, broker_id), broker_id)
        if best is None or key > best:
            best = key
    return None if best is None else best[1]


def ranking(group: str, broker_ids: Iterable[int]) -> list[int]:
    """Every broker id, the coordinator first, then where the group would go if it left, and so on."""
    return sorted(broker_ids, key=lambda b: (weight(group, b), b), reverse=True)


__all__ = ["coordinator_for", "ranking", "weight"]
