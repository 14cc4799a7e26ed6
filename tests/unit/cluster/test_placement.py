"""Rendezvous placement of groups on brokers: deterministic, balanced, and moving only what must move."""

from __future__ import annotations

import random

from rill.coordinator.placement import coordinator_for, ranking, weight

GROUPS = [f"group-{i}" for i in range(3000)]


def test_same_answer_whatever_the_order_of_the_brokers() -> None:
    """Every broker computes the same coordinator from the same set of ids, in any order."""
    ids = [1, 2, 3, 4, 5]
    for g in GROUPS[:200]:
        shuffled = ids[:]
        random.shuffle(shuffled)
        assert coordinator_for(g, shuffled) == coordinator_for(g, ids) == ranking(g, ids)[0]


def test_stable_across_processes() -> None:
    """The hash is BLAKE2b, not Python's salted hash(): pinned values stay the same in every process."""
    assert weight("orders-app", 1) == weight("orders-app", 1)
    assert weight("orders-app", 1) == int.from_bytes(
        __import__("hashlib").blake2b(b"orders-app\x001", digest_size=8).digest(), "big")
    assert [coordinator_for(f"g{i}", [1, 2, 3]) for i in range(6)] == [
        coordinator_for(f"g{i}", (3, 2, 1)) for i in range(6)]


def test_no_broker_no_coordinator() -> None:
    """With no live broker there is no coordinator."""
    assert coordinator_for("g", []) is None


def test_balanced() -> None:
    """Groups spread evenly: each of three brokers coordinates about a third."""
    counts = {1: 0, 2: 0, 3: 0}
    for g in GROUPS:
        found = coordinator_for(g, [1, 2, 3])
        assert found is not None
        counts[found] += 1
    assert all(800 <= c <= 1200 for c in counts.values()), counts


def test_a_leaving_broker_moves_only_its_own_groups() -> None:
    """When broker 2 leaves, only its groups move, each to its second choice; the others stay put."""
    before = {g: coordinator_for(g, [1, 2, 3]) for g in GROUPS}
    after = {g: coordinator_for(g, [1, 3]) for g in GROUPS}
    moved = {g for g in GROUPS if before[g] != after[g]}
    assert moved == {g for g in GROUPS if before[g] == 2}
    assert all(after[g] == ranking(g, [1, 2, 3])[1] for g in moved)


def test_a_joining_broker_takes_only_groups_for_itself() -> None:
    """When broker 4 joins, the groups that move all move to it (about a quarter), none between old brokers."""
    before = {g: coordinator_for(g, [1, 2, 3]) for g in GROUPS}
    after = {g: coordinator_for(g, [1, 2, 3, 4]) for g in GROUPS}
    moved = [g for g in GROUPS if before[g] != after[g]]
    assert all(after[g] == 4 for g in moved)
    assert 0.18 < len(moved) / len(GROUPS) < 0.32
