"""Kafka 0.7's consumer rebalance rule, ids node values and thread ids (rill.client.zookeeper.assignment)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rill.client.zookeeper.assignment import (FilterSubscription, StaticSubscription, consumer_id,
                                              decode_subscription, encode_subscription, group_assignment,
                                              normalize_regex, range_share, thread_ids)

SEED_004_IDS = ["59a1bce1-2b1d-11e1-9aff-040ccee02800", "95eb94bd-2b1d-11e1-8e73-040ccee02800",
                "bb451045-2b1d-11e1-b742-040ccee02800"]


def test_static_value_is_written_as_kafka_07_writes_it() -> None:
    """A static subscription is the JSON map with 0.7's spacing: { "topic1": 2, "topic2": 1 }."""
    value = encode_subscription(StaticSubscription({"topic1": 2, "topic2": 1}))
    assert value == b'{ "topic1": 2, "topic2": 1 }'
    assert decode_subscription(value) == StaticSubscription({"topic1": 2, "topic2": 1})
    assert decode_subscription(b'{"t":3}') == StaticSubscription({"t": 3})


def test_filter_values_round_trip() -> None:
    """Whitelist is *<n>*<regex>, blacklist !<n>!<regex>."""
    white = FilterSubscription("a.*,b", 2)
    black = FilterSubscription("tmp-.*", 1, blacklist=True)
    assert encode_subscription(white) == b"*2*a.*,b"
    assert encode_subscription(black) == b"!1!tmp-.*"
    assert decode_subscription(b"*2*a.*,b") == white
    assert decode_subscription(b"!1!tmp-.*") == black
    assert decode_subscription(b"*10*x*y") == FilterSubscription("x*y", 10)


@pytest.mark.parametrize("value", [b"[1, 2]", b"not json", b'{"t": 0}', b'{"t": true}', b'{"t": "x"}'])
def test_bad_values_are_refused(value: bytes) -> None:
    """A registration that is neither a filter nor a JSON map of positive counts is refused."""
    with pytest.raises(ValueError):
        decode_subscription(value)


def test_filters_match_whole_names_like_java_matches() -> None:
    """0.7 uses String.matches (a full match); commas mean alternatives, quotes and spaces go."""
    white = FilterSubscription("a.*, b", 1)
    assert normalize_regex(" 'a.*, b' ") == "a.*|b"
    assert [t for t in ["a1", "b", "bb", "xa"] if white.allows(t)] == ["a1", "b"]
    black = FilterSubscription("a.*", 1, blacklist=True)
    assert black.streams_by_topic(["a1", "b", "xa"]) == {"b": 1, "xa": 1}


def test_ids() -> None:
    """Consumer ids are <group>_<host>-<ms>-<hex> (or <group>_<consumerid>); thread ids add -<i>."""
    assert consumer_id("g", "host", 1324306324402, "abcd1234") == "g_host-1324306324402-abcd1234"
    assert consumer_id("g", "host", 1, given="59a1bce1") == "g_59a1bce1"
    assert thread_ids("g_c", 2) == ["g_c-0", "g_c-1"]


def test_seed_004_example() -> None:
    """Three consumers, two brokers with three partitions each: [0-0,0-1] [0-2,1-0] [1-1,1-2]."""
    parts = ["0-0", "0-1", "0-2", "1-0", "1-1", "1-2"]
    members = {f"g_{c}": StaticSubscription({"t": 1}) for c in SEED_004_IDS}
    shares = [sorted(group_assignment(f"g_{c}", members, {"t": parts}).owned) for c in SEED_004_IDS]
    assert shares == [[("t", "0-0"), ("t", "0-1")], [("t", "0-2"), ("t", "1-0")], [("t", "1-1"), ("t", "1-2")]]


def test_uneven_split_gives_extras_to_the_first_threads() -> None:
    """18 partitions over 4 threads is 5-5-4-4 (seed 004), contiguous and in order."""
    parts = [f"p{i:02d}" for i in range(18)]
    threads = ["a", "b", "c", "d"]
    shares = [range_share(parts, threads, t) for t in threads]
    assert [len(s) for s in shares] == [5, 5, 4, 4]
    assert sum(shares, []) == parts
    assert range_share(["x"], threads, "c") == []


def test_sorting_is_by_string() -> None:
    """Thread ids and partition names sort as strings: c-10 before c-2, 1-10 before 1-2."""
    members = {"c": StaticSubscription({"t": 11})}
    parts = [f"1-{i}" for i in range(11)]
    owned = group_assignment("c", members, {"t": parts}).owned
    assert owned[("t", "1-0")] == "c-0"
    assert owned[("t", "1-1")] == "c-1"
    assert owned[("t", "1-10")] == "c-10"  # "1-10" is the 3rd partition, "c-10" the 3rd thread
    assert owned[("t", "1-2")] == "c-2"


def test_filter_members_count_for_the_topics_they_allow() -> None:
    """A whitelist member joins the thread list of every topic its regex allows, and only those."""
    members = {"g_a": StaticSubscription({"x1": 1}), "g_b": FilterSubscription("x.*", 2)}
    topics = {"x1": ["0-0", "0-1", "0-2"], "y": ["0-0"]}
    plan_a = group_assignment("g_a", members, topics)
    plan_b = group_assignment("g_b", members, topics)
    assert plan_a.inputs["x1"][0] == ("g_a-0", "g_b-0", "g_b-1")
    assert plan_a.owned == {("x1", "0-0"): "g_a-0"}
    assert plan_b.owned == {("x1", "0-1"): "g_b-0", ("x1", "0-2"): "g_b-1"}
    assert "y" not in plan_b.inputs


def test_a_topic_nobody_lists_yet_gives_nothing() -> None:
    """A subscribed topic no broker lists yet gives no partitions (and still counts as an input)."""
    members = {"g_a": StaticSubscription({"later": 1})}
    plan = group_assignment("g_a", members, {})
    assert plan.owned == {} and plan.inputs == {"later": (("g_a-0",), ())}


@given(st.integers(0, 40), st.lists(st.integers(1, 4), min_size=1, max_size=6))
def test_every_partition_has_exactly_one_thread(n_parts: int, streams: list[int]) -> None:
    """Whatever the sizes, the members' shares are disjoint, cover every partition, and differ by at most one."""
    parts = [f"{b}-{p}" for b in range(3) for p in range(n_parts // 3 + (1 if b < n_parts % 3 else 0))]
    members = {f"g_m{i}": StaticSubscription({"t": s}) for i, s in enumerate(streams)}
    owners: dict[str, str] = {}
    for member in members:
        for (_, part), thread in group_assignment(member, members, {"t": parts}).owned.items():
            assert part not in owners
            owners[part] = thread
    assert set(owners) == set(parts)
    threads = sorted(t for m, s in members.items() for t in thread_ids(m, s.topics["t"]))
    counts = [sum(1 for t in owners.values() if t == thread) for thread in threads]
    assert counts == sorted(counts, reverse=True) and (not counts or counts[0] - counts[-1] <= 1)
