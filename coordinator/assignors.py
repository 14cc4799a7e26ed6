"""Partition assignors: who owns what after a rebalance.

Every assignor is a pure function with the same signature::

    assign(subscriptions, partitions, previous, static) -> {member_id: [(topic, partition), ...]}

- ``subscriptions``: member id -> the topics it consumes dynamically (may be empty:
  a member with only static partitions);
- ``partitions``: topic -> partition count (topics missing here have no partitions
  yet and are skipped);
- ``previous``: member id -> what it owned in the last generation (only ``sticky``
  reads it; unknown members and vanished partitions are ignored);
- ``static``: (topic, partition) -> the member that claimed it. A static claim is
  always given to its claimer (if the partition exists) and is excluded from the
  pool the assignor divides, so it is never handed to anyone else.

The result has an entry for every member of ``subscriptions`` and every claimer,
each a sorted list; every pooled partition of a subscribed topic goes to exactly
one member subscribed to that topic.

- ``range`` (Kafka's RangeAssignor; seed 000/004): per topic, the sorted pool is cut
  into contiguous ranges over the sorted subscribers, the extra partitions going to
  the earlier consumers (5-5-4-4, never 4-4-4-5).
- ``roundrobin`` (Kafka's RoundRobinAssignor): every pooled topic-partition, sorted,
  dealt in turn over the sorted members, skipping members not subscribed to its topic.
- ``sticky``: keeps each partition with its previous owner while that owner is
  still a member and subscribed, then balances: with equal subscriptions member
  counts differ by at most one, and the members that keep the most get the larger
  shares, so a member joining moves at most ceil(partitions / members) partitions.
  With unequal subscriptions it balances as far as subscriptions allow.

:func:`get_assignor` looks one up by name; an unknown name raises
:class:`UnknownAssignor`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from rill.client.structs import TopicPartition

Subscriptions = Mapping[str, AbstractSet[str]]
Assignment = dict[str, list[TopicPartition]]
Assignor = Callable[
    [Subscriptions, Mapping[str, int], Mapping[str, Sequence[TopicPartition]], Mapping[TopicPartition, str]],
    Assignment,
]


class UnknownAssignor(ValueError):
    """No assignor has this name."""


def _static_start(subscriptions: Subscriptions, partitions: Mapping[str, int],
                  static: Mapping[TopicPartition, str]) -> Assignment:
    """Every member with its existing static claims (claimers are members too)."""
    result: Assignment = {m: [] for m in subscriptions}
    for (topic, partition), member in static.items():
        owned = result.setdefault(member, [])
        if 0 <= partition < partitions.get(topic, 0):
            owned.append(TopicPartition(topic, partition))
    return result


def _subscribed_topics(subscriptions: Subscriptions, partitions: Mapping[str, int]) -> list[str]:
    return sorted({t for topics in subscriptions.values() for t in topics if partitions.get(t, 0) > 0})


def _pool(topic: str, count: int, static: Mapping[TopicPartition, str]) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in range(count) if (topic, p) not in static]


def _sorted(result: Assignment) -> Assignment:
    return {m: sorted(tps) for m, tps in result.items()}


def range_assignor(subscriptions: Subscriptions, partitions: Mapping[str, int],
                   previous: Mapping[str, Sequence[TopicPartition]],
                   static: Mapping[TopicPartition, str]) -> Assignment:
    """Contiguous ranges per topic; the first ``len(pool) % consumers`` consumers get one more."""
    result = _static_start(subscriptions, partitions, static)
    for topic in _subscribed_topics(subscriptions, partitions):
        consumers = sorted(m for m, topics in subscriptions.items() if topic in topics)
        pool = _pool(topic, partitions[topic], static)
        per_consumer, extra = divmod(len(pool), len(consumers))
        for i, member in enumerate(consumers):
            start = i * per_consumer + min(i, extra)
            result[member].extend(pool[start:start + per_consumer + (1 if i < extra else 0)])
    return _sorted(result)


def roundrobin_assignor(subscriptions: Subscriptions, partitions: Mapping[str, int],
                        previous: Mapping[str, Sequence[TopicPartition]],
                        static: Mapping[TopicPartition, str]) -> Assignment:
    """Sorted topic-partitions dealt over the sorted members, skipping non-subscribers."""
    result = _static_start(subscriptions, partitions, static)
    members = sorted(subscriptions)
    turn = 0
    for topic in _subscribed_topics(subscriptions, partitions):
        for tp in _pool(topic, partitions[topic], static):
            while topic not in subscriptions[members[turn % len(members)]]:
                turn += 1
            result[members[turn % len(members)]].append(tp)
            turn += 1
    return _sorted(result)


def _kept(subscriptions: Subscriptions, pool: set[TopicPartition],
          previous: Mapping[str, Sequence[TopicPartition]]) -> dict[str, list[TopicPartition]]:
    """What each member may keep from the last generation (first claimant wins a duplicate)."""
    kept: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
    taken: set[TopicPartition] = set()
    for member in sorted(subscriptions):
        for tp in sorted(set(previous.get(member, ()))):
            if tp in pool and tp not in taken and tp[0] in subscriptions[member]:
                kept[member].append(tp)
                taken.add(tp)
    return kept


def _quotas(kept: Mapping[str, list[TopicPartition]], eligible: list[str], total: int) -> dict[str, int]:
    """Fair shares; the larger ones go to the members that keep the most (fewest moves)."""
    if not eligible:
        return {}
    base, extra = divmod(total, len(eligible))
    ranked = sorted(eligible, key=lambda m: (-len(kept[m]), m))
    return {m: base + (1 if i < extra else 0) for i, m in enumerate(ranked)}


def _rebalance_unequal(owned: dict[str, list[TopicPartition]], subscriptions: Subscriptions) -> None:
    """Move partitions from a member to a subscribed one holding at least two fewer, while any can."""
    while True:
        counts = sorted(len(v) for v in owned.values())
        if not counts or counts[-1] - counts[0] <= 1:
            return
        move = None
        for donor in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            for tp in reversed(owned[donor]):
                takers = [m for m in owned if tp[0] in subscriptions[m] and len(owned[m]) + 1 < len(owned[donor])]
                if takers:
                    move = (donor, tp, min(takers, key=lambda m: (len(owned[m]), m)))
                    break
            if move:
                break
        if move is None:
            return
        donor, tp, taker = move
        owned[donor].remove(tp)
        owned[taker].append(tp)


def sticky_assignor(subscriptions: Subscriptions, partitions: Mapping[str, int],
                    previous: Mapping[str, Sequence[TopicPartition]],
                    static: Mapping[TopicPartition, str]) -> Assignment:
    """Keep previous owners where possible; balance with as few moves as possible."""
    result = _static_start(subscriptions, partitions, static)
    pool = [tp for t in _subscribed_topics(subscriptions, partitions) for tp in _pool(t, partitions[t], static)]
    pool_set = set(pool)
    kept = _kept(subscriptions, pool_set, previous)
    pool_topics = {t for t, _ in pool}
    eligible = sorted(m for m, topics in subscriptions.items() if pool_topics & set(topics))
    quotas = _quotas(kept, eligible, len(pool))
    owned = {m: kept[m][:quotas.get(m, 0)] for m in subscriptions}
    assigned = {tp for tps in owned.values() for tp in tps}
    for tp in pool:
        if tp in assigned:
            continue
        takers = [m for m in eligible if tp[0] in subscriptions[m]]
        taker = min(takers, key=lambda m: (len(owned[m]) >= quotas[m], len(owned[m]), m))
        owned[taker].append(tp)
    _rebalance_unequal({m: owned[m] for m in eligible}, subscriptions)
    for member, tps in owned.items():
        result[member].extend(tps)
    return _sorted(result)


ASSIGNORS: dict[str, Assignor] = {
    "range": range_assignor,
    "roundrobin": roundrobin_assignor,
    "sticky": sticky_assignor,
}

DEFAULT_ASSIGNOR = "range"


def get_assignor(name: str) -> Assignor:
    """The assignor called ``name``.

    Raises:
        UnknownAssignor: no assignor has that name.
    """
    try:
        return ASSIGNORS[name]
    except KeyError:
        raise UnknownAssignor(f"unknown assignment strategy {name!r}; known: {', '.join(sorted(ASSIGNORS))}") from None
