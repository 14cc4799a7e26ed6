"""range, roundrobin and sticky: the seed 000/004 rules and the properties every assignor keeps."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rill.coordinator.assignors import (
    ASSIGNORS, UnknownAssignor, get_assignor, range_assignor, roundrobin_assignor, sticky_assignor,
)

TP = tuple[str, int]


def _counts(result: dict[str, list[TP]]) -> list[int]:
    return [len(result[m]) for m in sorted(result)]


def test_range_gives_extra_partitions_to_the_earlier_consumers() -> None:
    """18 partitions over 4 consumers is 5-5-4-4 (never 4-4-4-5), in contiguous ranges."""
    members = {m: {"t"} for m in ("d", "b", "a", "c")}
    result = range_assignor(members, {"t": 18}, {}, {})
    assert _counts(result) == [5, 5, 4, 4]
    assert result["a"] == [("t", p) for p in range(0, 5)]
    assert result["b"] == [("t", p) for p in range(5, 10)]
    assert result["c"] == [("t", p) for p in range(10, 14)]
    assert result["d"] == [("t", p) for p in range(14, 18)]


def test_range_matches_the_seed_004_example() -> None:
    """Three consumers (sorted by id) over two brokers of three partitions each get [0-0,0-1], [0-2,1-0], [1-1,1-2]."""
    ids = ["bb451045-2b1d-11e1-b742-040ccee02800", "59a1bce1-2b1d-11e1-9aff-040ccee02800",
           "95eb94bd-2b1d-11e1-8e73-040ccee02800"]
    result = range_assignor({i: {"t"} for i in ids}, {"t": 6}, {}, {})
    broker_partition = {("t", b * 3 + p): f"{b}-{p}" for b in range(2) for p in range(3)}
    named = {i: [broker_partition[tp] for tp in result[i]] for i in ids}
    assert named == {"59a1bce1-2b1d-11e1-9aff-040ccee02800": ["0-0", "0-1"],
                     "95eb94bd-2b1d-11e1-8e73-040ccee02800": ["0-2", "1-0"],
                     "bb451045-2b1d-11e1-b742-040ccee02800": ["1-1", "1-2"]}


def test_range_works_per_topic() -> None:
    """Each topic is divided among its own subscribers only."""
    result = range_assignor({"a": {"x", "y"}, "b": {"x"}}, {"x": 3, "y": 2}, {}, {})
    assert result == {"a": [("x", 0), ("x", 1), ("y", 0), ("y", 1)], "b": [("x", 2)]}


def test_roundrobin_deals_sorted_partitions_over_sorted_subscribers() -> None:
    """Topic-partitions go round the members in order, skipping those not subscribed to the topic."""
    result = roundrobin_assignor({"a": {"x", "y"}, "b": {"x"}, "c": {"y"}}, {"x": 3, "y": 3}, {}, {})
    assert result == {"a": [("x", 0), ("x", 2), ("y", 1)], "b": [("x", 1)], "c": [("y", 0), ("y", 2)]}


def test_sticky_keeps_previous_owners() -> None:
    """With the same members, sticky returns the previous (balanced) assignment unchanged."""
    previous = {"a": [("t", 3), ("t", 0)], "b": [("t", 1), ("t", 2)]}
    assert sticky_assignor({"a": {"t"}, "b": {"t"}}, {"t": 4}, previous, {}) == {
        "a": [("t", 0), ("t", 3)], "b": [("t", 1), ("t", 2)]}


def test_static_claims_go_to_the_claimer_only() -> None:
    """A claimed partition goes to its claimer and is left out of everyone else's share."""
    for assign in ASSIGNORS.values():
        result = assign({"a": {"t"}, "b": {"t"}, "s": set()}, {"t": 5}, {}, {("t", 4): "s"})
        assert result["s"] == [("t", 4)]
        assert ("t", 4) not in result["a"] + result["b"]
        assert sorted(result["a"] + result["b"]) == [("t", p) for p in range(4)]


def test_unknown_assignor_name_is_an_error() -> None:
    """get_assignor raises UnknownAssignor for a name it does not know."""
    assert get_assignor("sticky") is sticky_assignor
    with pytest.raises(UnknownAssignor):
        get_assignor("nonsense")


members_st = st.lists(st.text("abcdefgh", min_size=1, max_size=3), min_size=1, max_size=8, unique=True)
topics_st = st.dictionaries(st.sampled_from(["x", "y", "z"]), st.integers(0, 12), min_size=1)


@st.composite
def cases(draw: st.DrawFn) -> tuple[dict[str, set[str]], dict[str, int], dict[TP, str]]:
    members = draw(members_st)
    topics = draw(topics_st)
    subscriptions = {m: draw(st.sets(st.sampled_from(sorted(topics) + ["missing"]))) for m in members}
    every = [(t, p) for t, n in sorted(topics.items()) for p in range(n)]
    claimed = draw(st.lists(st.sampled_from(every), unique=True, max_size=3)) if every else []
    static = {tp: draw(st.sampled_from(members)) for tp in claimed}
    return subscriptions, topics, static


@settings(max_examples=150, deadline=None)
@given(cases(), st.sampled_from(sorted(ASSIGNORS)))
def test_every_assignor_gives_each_partition_to_exactly_one_subscriber(
        case: tuple[dict[str, set[str]], dict[str, int], dict[TP, str]], name: str) -> None:
    """Every pooled partition of a subscribed topic goes to exactly one subscriber; claims to their claimers."""
    subscriptions, topics, static = case
    result = ASSIGNORS[name](subscriptions, topics, {}, static)
    assert set(result) == set(subscriptions) and all(v == sorted(v) for v in result.values())
    owners: dict[TP, str] = {}
    for member, tps in result.items():
        for tp in tps:
            assert tp not in owners
            owners[tp] = member
            assert static.get(tp, member) == member
            assert tp in static or tp[0] in subscriptions[member]
    subscribed = {t for s in subscriptions.values() for t in s}
    expected = {(t, p) for t in subscribed for p in range(topics.get(t, 0))} | set(static)
    assert set(owners) == expected


@settings(max_examples=150, deadline=None)
@given(members_st, st.integers(0, 40), st.sampled_from(sorted(ASSIGNORS)))
def test_equal_subscriptions_are_balanced_within_one(members: list[str], partitions: int, name: str) -> None:
    """With one topic and equal subscriptions every assignor's counts differ by at most one."""
    result = ASSIGNORS[name]({m: {"t"} for m in members}, {"t": partitions}, {}, {})
    counts = _counts(result)
    assert max(counts) - min(counts) <= 1


@settings(max_examples=150, deadline=None)
@given(members_st, st.integers(0, 60), st.data())
def test_sticky_join_moves_at_most_a_fair_share(members: list[str], partitions: int, data: st.DataObject) -> None:
    """A member joining a balanced sticky group moves at most ceil(partitions / members) partitions."""
    before = sticky_assignor({m: {"t"} for m in members}, {"t": partitions}, {}, {})
    joiner = data.draw(st.text("ijklmn", min_size=1, max_size=3))
    after = sticky_assignor({m: {"t"} for m in [*members, joiner]}, {"t": partitions}, before, {})
    moved = sum(1 for m, tps in after.items() for tp in tps if tp not in before.get(m, []))
    assert moved <= math.ceil(partitions / (len(members) + 1))
    counts = _counts(after)
    assert max(counts) - min(counts) <= 1


@settings(max_examples=100, deadline=None)
@given(members_st, st.integers(0, 60), st.data())
def test_sticky_leave_moves_only_the_leavers_partitions(members: list[str], partitions: int,
                                                        data: st.DataObject) -> None:
    """When a member leaves, sticky moves only the partitions it owned."""
    before = sticky_assignor({m: {"t"} for m in members}, {"t": partitions}, {}, {})
    leaver = data.draw(st.sampled_from(members))
    rest = [m for m in members if m != leaver]
    after = sticky_assignor({m: {"t"} for m in rest}, {"t": partitions}, before, {})
    for member in rest:
        assert set(before[member]) <= set(after[member])
